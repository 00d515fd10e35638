"""Tiering closed segments for the reader's tests, through the manifest's own API.

Each closed segment becomes one object of its parts back to back (log bytes, trimmed
offset and time indexes, empty producer snapshot and leader-epoch parts), started
and finished in the partition's manifest as an uploader does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

from tierlog.storage.checkpoints import TopicPartition
from tierlog.storage.index import NO_TIMESTAMP
from tierlog.storage.log import Log
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.layout import new_segment_id, segment_key
from tierlog.storage.tier.manifest import (
    PartitionManifest,
    RemoteSegment,
    SegmentPart,
    SegmentState,
    part_ranges,
)
from tierlog.storage.tier.manifest_store import ManifestWriter
from tierlog.storage.tier.store import ObjectStore


def tier_segments(
    store: ObjectStore, tp: TopicPartition, segments: Sequence[LogSegment]
) -> PartitionManifest:
    """Upload closed ``segments`` (in offset order) and return the resulting manifest."""
    writer = ManifestWriter.claim(store, tp, "test-writer")
    for segment in segments:
        remote = _upload(store, tp, writer.writer_epoch, segment)
        writer.update(partial(PartitionManifest.start_upload, segment=remote))
        writer.update(partial(PartitionManifest.finish_upload, segment_id=remote.segment_id))
    return writer.manifest


def tier_closed_segments(store: ObjectStore, tp: TopicPartition, log: Log) -> PartitionManifest:
    return tier_segments(store, tp, log.segments[:-1])


def _upload(
    store: ObjectStore, tp: TopicPartition, epoch: int, segment: LogSegment
) -> RemoteSegment:
    log_bytes = segment.log.read(0, segment.size)
    offset_index = segment.offset_index.path.read_bytes()[: segment.offset_index.size_bytes]
    time_index = segment.time_index.path.read_bytes()[: segment.time_index.size_bytes]
    segment_id = new_segment_id()
    key = segment_key(tp, segment.base_offset, epoch, segment_id)
    store.put(key, log_bytes + offset_index + time_index)
    first = segment.log.header_at(0)
    return RemoteSegment(
        segment_id=segment_id,
        writer_epoch=epoch,
        state=SegmentState.STARTED,
        base_offset=segment.base_offset,
        end_offset=segment.next_offset,
        base_timestamp=first.header.max_timestamp if first else NO_TIMESTAMP,
        max_timestamp=segment.max_timestamp_so_far,
        offset_of_max_timestamp=segment.offset_of_max_timestamp,
        key=key,
        parts=part_ranges(
            {
                SegmentPart.LOG: len(log_bytes),
                SegmentPart.OFFSET_INDEX: len(offset_index),
                SegmentPart.TIME_INDEX: len(time_index),
            }
        ),
        created_ms=int(time.time() * 1000),
    )
