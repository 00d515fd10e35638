"""The parts a store object decoded or wrote, kept so that a document is decoded once.

A controller's pass reads a topic's parts into its view, then ``alter_partitions``
reads the head again to learn the layout and each part again inside its write; a
broker's next poll reads back what its own controller just wrote. Decoding a part
(JSON, then a ``PartitionState`` checked per partition) was most of a failover pass's
CPU, and each of those reads finds the document last decoded or written: so each part
is kept beside the digest of its document, and a read of the same document reuses it.

A part is found only under its exact document (its digest), so what it gives back is
what decoding that document gives: the store's checks still judge every read. One
entry a part (the latest document), and a topic's go once it is deleted: the memory is
that of the states the store object's readers already hold. The digest, not the
document, is kept: a part's document is some 150 KB. Thread-safe: an entry is one
dictionary item, written whole.
"""

from __future__ import annotations

import hashlib

from tierlog.partition_state.model import StatePart

__all__ = ["DecodedParts"]


class DecodedParts:
    def __init__(self) -> None:
        self._parts: dict[tuple[str, int], tuple[bytes, StatePart]] = {}

    def get(self, topic: str, index: int, text: str) -> StatePart | None:
        """The part last kept under ``text`` for the topic's part ``index`` (None: another
        document, or none kept). Its ``partitions`` are shared: read, never change them."""
        kept = self._parts.get((topic, index))
        return kept[1] if kept is not None and kept[0] == _digest(text) else None

    def put(self, topic: str, index: int, text: str, part: StatePart) -> None:
        """``part`` is what ``text`` decodes to."""
        self._parts[(topic, index)] = (_digest(text), part)

    def forget(self, topic: str) -> None:
        for key in [key for key in list(self._parts) if key[0] == topic]:
            self._parts.pop(key, None)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()
