"""Tiering closed segments for the reader's tests with the uploader's own ``upload_segment``:
each segment becomes one object (log bytes, trimmed indexes, producer snapshot, leader
epochs), started and finished in the partition's manifest."""

from __future__ import annotations

import time
from collections.abc import Sequence

from tierlog.storage.log import Log
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.manifest import PartitionManifest
from tierlog.storage.tier.manifest_store import ManifestWriter
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.uploader import upload_segment
from tierlog.storage.topic_partition import TopicPartition


def tier_segments(
    store: ObjectStore, tp: TopicPartition, segments: Sequence[LogSegment]
) -> PartitionManifest:
    """Upload closed, flushed ``segments`` (in offset order); the resulting manifest."""
    writer = ManifestWriter.claim(store, tp, "test-writer")
    for segment in segments:
        upload_segment(
            writer,
            segment,
            clock_ms=lambda: int(time.time() * 1000),
        )
    return writer.manifest


def tier_closed_segments(store: ObjectStore, tp: TopicPartition, log: Log) -> PartitionManifest:
    log.flush()
    return tier_segments(store, tp, log.segments[:-1])
