"""Tiers as a place to read from: ``file://`` (the local-directory store) and ``s3://``
(the S3 store), opened by the tier's own ``open_store`` with the query's S3 options.

Everything about the tier's format comes from the tier's own modules: the partitions
are found from segment keys (``layout.parse_segment_key``), a partition's readable
segments and log start from its manifest (``manifest_store.load_view``), and each
part of a segment object through ``read_part`` (ranged GETs). The indexes are Kafka's
own files, read with the storage engine's index classes.

Segment readers share one store per tier (and S3 options) in a process: a worker reads
split after split of the same tier, and an S3 store's boto3 client costs ~0.1-0.5 s of
CPU to make (its service model and endpoint rules parsed again), more than decoding a
64 MiB segment; shared, its connections are reused as well.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from tierlog.pipeline.listing import PartitionSegments, SegmentInfo
from tierlog.pipeline.segments import IndexColumns, SegmentRef, live_prefix
from tierlog.storage.file_records import FileBatch, scan_batches
from tierlog.storage.index import OffsetIndex, SegmentIndex, TimeIndex
from tierlog.storage.tier.layout import parse_segment_key
from tierlog.storage.tier.manifest import RemoteSegment, SegmentPart
from tierlog.storage.tier.manifest_store import load_view, read_part
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.url import open_store as open_tier_store
from tierlog.storage.transaction_index import AbortedTxn, decode_entries

__all__ = [
    "RemoteSegmentReader",
    "index_file_columns",
    "list_tier",
    "open_remote_segment",
    "open_store",
    "shared_store",
]

READ_CHUNK_BYTES = 8 * 1024 * 1024


def open_store(url: str, s3: S3Options | None = None) -> ObjectStore:
    """The object store a tier URL names (``InvalidStoreUrlError`` for a bad one)."""
    return open_tier_store(url, s3)


def list_tier(
    url: str, topics: Iterable[str] | None, s3: S3Options | None = None
) -> list[PartitionSegments]:
    """Every partition with readable segments in the tier at ``url``."""
    wanted = None if topics is None else set(topics)
    store = open_store(url, s3)
    try:
        found = {parsed.tp for info in store.list("") if (parsed := parse_segment_key(info.key))}
        partitions = []
        for tp in sorted(found):
            if wanted is not None and tp.topic not in wanted:
                continue
            view = load_view(store, tp)
            segments = tuple(
                SegmentInfo(
                    SegmentRef(segment.base_offset, segment.key, url, segment, s3),
                    segment.end_offset,
                    segment.log_size_bytes,
                )
                for segment in view.all_segments()
            )
            partitions.append(PartitionSegments(tp, segments, view.log_start_offset))
        return partitions
    finally:
        store.close()


@functools.cache
def shared_store(url: str, s3: S3Options | None = None) -> ObjectStore:
    """The process's store for the tier at ``url``: never closed, it lives as long as
    the process (a Spark worker), whose splits of that tier all read through it."""
    return open_store(url, s3)


class RemoteSegmentReader:
    """One tiered segment, read with ranged GETs of its object's parts, through the
    process's ``shared_store`` (which closing the reader leaves open)."""

    def __init__(self, ref: SegmentRef, store: ObjectStore):
        assert ref.tier_segment is not None
        self.ref = ref
        self.segment: RemoteSegment = ref.tier_segment
        self.store = store
        self._indexes: dict[SegmentPart, IndexColumns] = {}

    @property
    def size_bytes(self) -> int:
        return self.segment.log_size_bytes

    def _index(self, part: SegmentPart, index_type: type[SegmentIndex]) -> IndexColumns:
        if part not in self._indexes:
            keys, values = index_file_columns(
                read_part(self.store, self.segment, part), index_type, self.segment.base_offset
            )
            self._indexes[part] = live_prefix(keys, values)
        return self._indexes[part]

    def offset_index(self) -> IndexColumns:
        return self._index(SegmentPart.OFFSET_INDEX, OffsetIndex)

    def time_index(self) -> IndexColumns:
        return self._index(SegmentPart.TIME_INDEX, TimeIndex)

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[FileBatch]:
        """Whole batches from ``start``, fetched in large ranged reads."""
        end = self.size_bytes if end is None else min(end, self.size_bytes)
        return scan_batches(self._read_log, start, end, READ_CHUNK_BYTES)

    def _read_log(self, position: int, length: int) -> bytes:
        return read_part(self.store, self.segment, SegmentPart.LOG, position, position + length)

    def headers(self, start: int = 0) -> Iterator[FileBatch]:
        return self.batches(start)

    def aborted_transactions(self) -> list[AbortedTxn]:
        data = read_part(self.store, self.segment, SegmentPart.TXN_INDEX)
        return decode_entries(data, self.segment.key)

    def producer_snapshot(self, end_offset: int) -> bytes:
        if end_offset != self.segment.end_offset:
            return b""
        return read_part(self.store, self.segment, SegmentPart.PRODUCER_SNAPSHOT)

    def close(self) -> None:
        """Nothing to release: the store is the process's (``shared_store``)."""


def index_file_columns(
    data: bytes, index_type: type[SegmentIndex], base_offset: int
) -> tuple[list[int], list[int]]:
    """Every entry of a fetched index, decoded by the storage engine's own index class."""
    if not data:
        return [], []
    with tempfile.NamedTemporaryFile(suffix=".index") as file:
        file.write(data)
        file.flush()
        index = index_type(Path(file.name), base_offset, 0, writable=False, read_only=True)
        try:
            keys, values = index.columns()
            return list(keys), list(values)
        finally:
            index.close()


def open_remote_segment(ref: SegmentRef) -> RemoteSegmentReader:
    assert ref.store_url is not None
    return RemoteSegmentReader(ref, shared_store(ref.store_url, ref.s3))
