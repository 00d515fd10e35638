"""The cleaner's key -> latest offset map, held within a memory budget.

Kafka's SkimpyOffsetMap stores a 16-byte MD5 of each key in an open-addressing table
(24 bytes a slot): two different keys whose digests collide share one slot, and the
older key's live record is then dropped as if it had been overwritten. Here the map is
a ``dict`` keyed by the *full key bytes*, so two keys are the same entry only when
they are equal byte for byte: a collision costs a probe, never a record.

The price is memory: a key is held as a ``bytes`` object (its length plus 33 bytes,
rounded up to 8), its offset as an ``int`` (32 bytes), and its share of the hash table
(up to 96 bytes at the peak of a table resize). ``memory_bytes`` counts exactly those
terms for every key, so the budget (``log.cleaner.dedupe.buffer.size``) is never
exceeded; for 100-byte keys that is 264 bytes a key against SkimpyOffsetMap's 24 / 0.9.
When a dirty range holds more distinct keys than fit, the cleaner stops the map at a
batch boundary, cleans up to there and carries on from there in its next round.
"""

from __future__ import annotations

import sys

__all__ = ["INT_BYTES", "TABLE_BYTES_PER_KEY", "OffsetMap", "key_cost_bytes"]

# A Python int above the small-int cache: 28 bytes, allocated in 32-byte blocks.
INT_BYTES = 32
# A dict entry (hash, key and value pointers) plus its index slot, at the worst load
# just after the table grows, with the old table still alive while entries move over.
TABLE_BYTES_PER_KEY = 96


def key_cost_bytes(key: bytes) -> int:
    """What one more distinct ``key`` costs the map, in bytes of process memory."""
    return (sys.getsizeof(key) + 7) // 8 * 8 + INT_BYTES + TABLE_BYTES_PER_KEY


class OffsetMap:
    """Key -> the largest offset put for it, for keys whose memory fits ``budget_bytes``."""

    def __init__(self, budget_bytes: int):
        if budget_bytes <= 0:
            raise ValueError(f"an offset map needs a positive budget, not {budget_bytes}")
        self.budget_bytes = budget_bytes
        self.memory_bytes = 0
        self.latest_offset = -1  # the largest offset put so far
        self._offsets: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def fits(self, new_keys_cost_bytes: int) -> bool:
        """Whether keys costing ``new_keys_cost_bytes`` (``key_cost_bytes`` each) fit too."""
        return self.memory_bytes + new_keys_cost_bytes <= self.budget_bytes

    def put(self, key: bytes, offset: int) -> None:
        """Record ``offset`` for ``key`` (callers put offsets in increasing order)."""
        offsets = self._offsets
        if key not in offsets:
            self.memory_bytes += key_cost_bytes(key)
        offsets[key] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset put for ``key``, or -1 when the map does not hold it."""
        return self._offsets.get(key, -1)

    def __contains__(self, key: object) -> bool:
        return key in self._offsets

    def clear(self) -> None:
        self._offsets = {}
        self.memory_bytes = 0
        self.latest_offset = -1

    @property
    def utilization(self) -> float:
        return self.memory_bytes / self.budget_bytes
