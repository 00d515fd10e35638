"""Tiering a log's closed segments with the real uploader, and local retention after it,
for the pipeline's tests."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.storage.conftest import read_all_records
from tierlog.storage.log import Log
from tierlog.storage.records import V2_HEADER_SIZE, Record, parse_header
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest import PartitionManifest
from tierlog.storage.tier.manifest_store import ManifestWriter, load_view
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.uploader import upload_segment
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "SplitHistory",
    "delete_local_copies",
    "flip_a_byte_of_the_second_segment",
    "tier_closed_segments",
    "tier_segments",
    "tier_then_delete_older_half",
]


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


def delete_local_copies(segments: Sequence[LogSegment]) -> None:
    """Remove the files of tiered segments of a closed log, as local retention does: from
    then on only the tier holds their records."""
    for segment in segments:
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            Path(segment.log.path).with_suffix(suffix).unlink(missing_ok=suffix == ".txnindex")


@dataclass(frozen=True)
class SplitHistory:
    """A partition whose offsets below ``local_start`` are in the tier only, those from
    ``local_start`` to ``tier_end`` in both places and the rest on local disk only."""

    records: list[Record]  # every record, as storage read them before the deletion
    local_start: int
    tier_end: int


def tier_then_delete_older_half(store: ObjectStore, tp: TopicPartition, log: Log) -> SplitHistory:
    """Tier ``log``'s closed segments, close it and delete the older half of its segments
    locally."""
    tier_end = tier_closed_segments(store, tp, log).uploaded_end_offset
    records = read_all_records(log)
    segments = log.segments
    log.close()
    half = len(segments) // 2
    delete_local_copies(segments[:half])
    return SplitHistory(records, segments[half].base_offset, tier_end)


def flip_a_byte_of_the_second_segment(store: LocalDirectoryStore, tp: TopicPartition) -> str:
    """Damage a record of the first batch of ``tp``'s second tiered segment (its CRC no
    longer matches); returns the segment's key."""
    victim = load_view(store, tp).all_segments()[1]
    path = store.root / victim.key
    data = bytearray(path.read_bytes())
    data[parse_header(bytes(data[:V2_HEADER_SIZE])).size + V2_HEADER_SIZE + 4] ^= 0x01
    path.write_bytes(bytes(data))
    return victim.key
