"""Kafka's default partitioning: murmur2 of the key, sticky partitions for null keys.

A keyed record goes to ``toPositive(murmur2(key)) % num_partitions``, bit for bit as
Kafka's ``Utils.murmur2`` (seed 0x9747b28c, 32-bit signed arithmetic, key bytes read as
signed Java bytes in the tail) and ``BuiltInPartitioner.partitionForKey``: a key lands on
the same partition whether a Java or a tierlog producer wrote it.  The test vectors come
from Kafka's own jars (tests/client/java/Murmur2Vectors.java).

A record without a key sticks to one partition per topic so that it fills a batch
instead of spreading one-record batches everywhere (KIP-480).  When the sticky
partition moves is Kafka 3.3+'s rule (KIP-794, uniform sticky), which refines
KIP-480's "on every new batch": after ``batch.size`` bytes were appended to it and its
last batch is full, or after twice ``batch.size`` whatever the batch, so a slow
partition whose batches fill while they wait does not attract more data.  The next
partition is drawn uniformly (it may be the same one).  Kafka's adaptive weighting by
per-broker queue length is not here: it needs the transport's queue sizes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["MURMUR2_SEED", "StickyPartitioner", "murmur2", "partition_for_key", "to_positive"]

MURMUR2_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF


def _signed32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit hash of ``data``.

    Worked in unsigned 32-bit arithmetic, which matches Java's wrapping ints bit for bit
    (Java's ``>>>`` is a logical shift of those bits); every byte is read as Java's
    ``data[i] & 0xff`` reads it, unsigned.  Only the result is made signed.
    """
    length = len(data)
    h = (MURMUR2_SEED ^ length) & _MASK32
    body = length - (length & 3)
    for i in range(0, body, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[body + 2] << 16
    if tail >= 2:
        h ^= data[body + 1] << 8
    if tail >= 1:
        h ^= data[body]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return _signed32(h)


def to_positive(value: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``: MIN_VALUE maps to 0)."""
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a record with ``key``."""
    if num_partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


@dataclass
class _Sticky:
    partition: int
    produced_bytes: int = 0


class StickyPartitioner:
    """The partition for each record of a producer, over any number of topics.

    The accumulator asks ``partition`` before an append and reports it with
    ``on_sticky_append``; ``rng`` is injectable so tests can fix the draws.
    """

    def __init__(self, batch_size: int, rng: random.Random | None = None) -> None:
        self._sticky_batch_size = max(1, batch_size)
        self._rng = rng or random.Random()
        self._sticky: dict[str, _Sticky] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        """Where a record with ``key`` goes (``partitioner.ignore.keys`` is the caller's)."""
        if key is not None:
            return partition_for_key(key, num_partitions)
        return self.sticky_partition(topic, num_partitions)

    def sticky_partition(self, topic: str, num_partitions: int) -> int:
        """The current sticky partition of ``topic``, drawn on first use or if the topic
        shrank below it (a partition count seen from fresher metadata)."""
        if num_partitions < 1:
            raise ValueError(f"a topic has at least one partition, not {num_partitions}")
        sticky = self._sticky.get(topic)
        if sticky is None or sticky.partition >= num_partitions:
            sticky = _Sticky(self._draw(num_partitions))
            self._sticky[topic] = sticky
        return sticky.partition

    def on_sticky_append(
        self,
        topic: str,
        partition: int,
        appended_bytes: int,
        num_partitions: int,
        *,
        last_batch_full: bool,
    ) -> None:
        """Count the bytes of a record the sticky partition took; maybe move it.

        Only records that were partitioned stickily count, as in Kafka: keyed records
        appended to the same partition fill its batch but do not hasten the move.
        """
        sticky = self._sticky.get(topic)
        if sticky is None or sticky.partition != partition:
            return
        sticky.produced_bytes += appended_bytes
        enough = sticky.produced_bytes >= self._sticky_batch_size
        too_much = sticky.produced_bytes >= 2 * self._sticky_batch_size
        if (enough and last_batch_full) or too_much:
            self._sticky[topic] = _Sticky(self._draw(num_partitions))

    def _draw(self, num_partitions: int) -> int:
        return self._rng.randrange(num_partitions)
