"""Tiering a log's closed segments with the real uploader, for the pipeline's tests."""

from __future__ import annotations

import time
from collections.abc import Sequence

from tierlog.storage.checkpoints import TopicPartition
from tierlog.storage.log import Log
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.manifest import PartitionManifest
from tierlog.storage.tier.manifest_store import ManifestWriter
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.uploader import upload_segment

__all__ = ["tier_closed_segments", "tier_segments"]


def tier_closed_segments(store: ObjectStore, tp: TopicPartition, log: Log) -> PartitionManifest:
    """Upload every closed segment not yet in the tier; returns the manifest after."""
    log.flush()
    return tier_segments(store, tp, log.segments[:-1])


def tier_segments(
    store: ObjectStore, tp: TopicPartition, segments: Sequence[LogSegment]
) -> PartitionManifest:
    """Upload closed, flushed ``segments`` (in offset order) that the tier lacks."""
    writer = ManifestWriter.claim(store, tp, "pipeline-tests")
    for segment in segments:
        if segment.base_offset < writer.manifest.uploaded_end_offset:
            continue
        upload_segment(writer, segment, clock_ms=lambda: int(time.time() * 1000))
    return writer.manifest
