"""Read-only views of one segment's log and indexes, for planning and decoding.

The pipeline never writes what it reads: a log dir may belong to a running sidecar,
so files open read-only and nothing is trimmed or recovered. An active segment's
index is preallocated with a zero-filled tail, and a crash can leave one so; only the
strictly increasing prefix of an index is believed (``live_prefix``), which a writer
appending behind our back can only extend.

A ``SegmentRef`` is the small picklable name of a segment that travels in a split to
an executor, which opens it there with ``readers.open_segment``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tierlog.storage.file_records import FileBatch, FileRecords
from tierlog.storage.index import OffsetIndex, SegmentIndex, TimeIndex
from tierlog.storage.producer_snapshot import snapshot_path
from tierlog.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex

if TYPE_CHECKING:
    from tierlog.storage.tier.manifest import RemoteSegment
    from tierlog.storage.tier.s3_store import S3Options

__all__ = [
    "IndexColumns",
    "LocalSegment",
    "Opener",
    "SegmentReader",
    "SegmentRef",
    "live_prefix",
]


@dataclass(frozen=True)
class IndexColumns:
    """An index's live entries as two columns: keys (offsets or timestamps) and values
    (positions or offsets)."""

    keys: Sequence[int]
    values: Sequence[int]

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class SegmentRef:
    """Where a segment lives: a local ``.log`` path, or an object in a tier
    (``store_url``, reached with ``s3`` for an ``s3://`` tier), with the manifest entry
    that says where its parts are."""

    base_offset: int
    path: str
    store_url: str | None = None
    tier_segment: RemoteSegment | None = None
    s3: S3Options | None = None

    @property
    def is_remote(self) -> bool:
        return self.store_url is not None

    @property
    def has_txn_index(self) -> bool:
        """Whether the segment lists aborted transactions, known without opening it (a
        tier's store client is not cheap to make): its index file or part is not empty."""
        if self.tier_segment is not None:
            from tierlog.storage.tier.manifest import SegmentPart

            return self.tier_segment.range_of(SegmentPart.TXN_INDEX).length > 0
        try:
            return Path(self.path).with_suffix(TXN_INDEX_SUFFIX).stat().st_size > 0
        except FileNotFoundError:
            return False


class SegmentReader(Protocol):
    """What planning and decoding need of a segment, wherever it is stored."""

    ref: SegmentRef

    @property
    def size_bytes(self) -> int: ...

    def offset_index(self) -> IndexColumns: ...

    def time_index(self) -> IndexColumns: ...

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[FileBatch]:
        """Whole batches in ``[start, end)`` (a batch boundary), read sequentially."""
        ...

    def headers(self, start: int = 0) -> Iterator[FileBatch]:
        """Batches from ``start`` with at least their headers' bytes (a local file walks
        the headers alone; a tier has them fetched in large ranged reads anyway)."""
        ...

    def aborted_transactions(self) -> list[AbortedTxn]:
        """The entries of the segment's transaction index (none when it has none)."""
        ...

    def producer_snapshot(self, end_offset: int) -> bytes:
        """The producer snapshot stored at the segment's end offset ``end_offset``, as
        bytes (empty when there is none)."""
        ...

    def close(self) -> None: ...


Opener = Callable[[SegmentRef], SegmentReader]


def live_prefix(keys: Sequence[int], values: Sequence[int]) -> IndexColumns:
    """The entries up to the first whose key does not grow (a zero-filled tail)."""
    end = len(keys)
    for slot in range(1, len(keys)):
        if keys[slot] <= keys[slot - 1]:
            end = slot
            break
    return IndexColumns(keys[:end], values[:end])


class LocalSegment:
    """A segment in a local partition directory, opened read-only."""

    def __init__(self, ref: SegmentRef):
        self.ref = ref
        self._log = FileRecords(Path(ref.path), read_only=True)

    @property
    def size_bytes(self) -> int:
        return self._log.size

    def _index(self, index_type: type[SegmentIndex], suffix: str) -> IndexColumns:
        path = Path(self.ref.path).with_suffix(suffix)
        if not path.exists():  # Kafka rebuilds a missing index; we scan instead
            return IndexColumns([], [])
        index = index_type(path, self.ref.base_offset, 0, writable=False, read_only=True)
        try:
            keys, values = index.columns()
            return live_prefix(list(keys), list(values))
        finally:
            index.close()

    def offset_index(self) -> IndexColumns:
        return self._index(OffsetIndex, ".index")

    def time_index(self) -> IndexColumns:
        return self._index(TimeIndex, ".timeindex")

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[FileBatch]:
        return self._log.batches(start, end)

    def headers(self, start: int = 0) -> Iterator[FileBatch]:
        return self._log.headers(start)

    def aborted_transactions(self) -> list[AbortedTxn]:
        path = Path(self.ref.path).with_suffix(TXN_INDEX_SUFFIX)
        return TransactionIndex(path, self.ref.base_offset).entries()

    def producer_snapshot(self, end_offset: int) -> bytes:
        try:
            return snapshot_path(Path(self.ref.path).parent, end_offset).read_bytes()
        except FileNotFoundError:
            return b""

    def close(self) -> None:
        self._log.close()
