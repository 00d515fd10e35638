"""Kafka 4.1.1 judges segments the tier cleaner wrote: a compacted, tiered log (every
codec, an idempotent producer, tombstones) is uploaded and its tier cleaned; each cleaned
segment's log and trimmed indexes, downloaded from the tier as a reader gets them, pass
DumpLogSegments' deep iteration, --verify-index-only and --index-sanity-check, and hold
exactly the records tierlog's tier reader serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.storage.cleaner import Cleaner
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import CompressionType, SimpleRecord, build_batch, iter_batches
from tierlog.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_path
from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest import SegmentPart
from tierlog.storage.tier.manifest_store import load_manifest, load_view, read_part
from tierlog.storage.tier.range_reader import RangeReader
from tierlog.storage.tier.remote_log_manager import RemoteLogManager
from tierlog.storage.tier.tiered_cleaner import TierCleaner
from tierlog.storage.topic_partition import TopicPartition

from .kafka import DumpOutput, verify_partition_dir

pytestmark = pytest.mark.interop

TP = TopicPartition("compacted", 0)
T0 = 1_700_000_000_000
CODECS = list(CompressionType)
CONFIG = LogConfig.from_properties(
    {
        "cleanup.policy": "compact",
        "remote.storage.enable": "true",
        "segment.bytes": 3000,
        "index.interval.bytes": 200,
        "local.retention.bytes": 0,
        "min.cleanable.dirty.ratio": 0.01,
        "file.delete.delay.ms": 0,
        "message.timestamp.after.max.ms": 2**62,
    }
)
PARTS = {
    LOG_SUFFIX: SegmentPart.LOG,
    INDEX_SUFFIX: SegmentPart.OFFSET_INDEX,
    TIME_INDEX_SUFFIX: SegmentPart.TIME_INDEX,
}


def write_tier_and_clean(root: Path) -> LocalDirectoryStore:
    """Overwrites of 30 keys in every codec, some by an idempotent producer, tombstones
    for a few; uploaded, then the tier cleaned once."""
    store = LocalDirectoryStore(root / "tier")
    log = Log.open(root / "data" / TP.dir_name, CONFIG, clock_ms=lambda: T0)
    sequence = 0
    for round_number in range(12):
        for start in range(0, 30, 5):
            idempotent = start % 10 == 0
            value = None if round_number == 11 and start == 5 else b"value-%d" % round_number
            records = [
                SimpleRecord(b"key-%02d" % k, value, T0 + round_number)
                for k in range(start, start + 5)
            ]
            log.append(
                build_batch(
                    records,
                    compression=CODECS[(round_number + start) % len(CODECS)],
                    producer_id=7 if idempotent else -1,
                    producer_epoch=0 if idempotent else -1,
                    base_sequence=sequence if idempotent else -1,
                )
            )
            sequence += 5 if idempotent else 0
    log.roll()
    ranges = RangeReader(
        store, ChunkCache(root / "cache", chunk_bytes=4096, max_bytes=1 << 24, max_entries=1024)
    )
    rlm = RemoteLogManager(store, clock_ms=lambda: T0)
    rlm.attach(TP, log)
    rlm.run_once()  # uploads every closed segment
    rlm.cleaner = TierCleaner(Cleaner(1 << 20), ranges, root / "scratch")
    rlm.run_once()
    assert rlm.cleaner.passes == 1
    rlm.stop()
    ranges.close()
    log.close()
    return store


def download(store: LocalDirectoryStore, directory: Path) -> None:
    """Each tiered segment's log and indexes as a partition directory's files."""
    directory.mkdir(parents=True)
    for segment in load_view(store, TP).all_segments():
        for suffix, part in PARTS.items():
            segment_path(directory, segment.base_offset, suffix).write_bytes(
                read_part(store, segment, part)
            )


@pytest.fixture(scope="module")
def cleaned(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[LocalDirectoryStore, Path, DumpOutput]:
    root = tmp_path_factory.mktemp("tier-cleaned")
    store = write_tier_and_clean(root)
    directory = root / "downloaded" / TP.dir_name
    download(store, directory)
    return store, directory, verify_partition_dir(directory)


def test_kafka_finds_the_downloaded_cleaned_segments_valid(
    cleaned: tuple[LocalDirectoryStore, Path, DumpOutput],
) -> None:
    store, _directory, checks = cleaned
    assert load_manifest(store, TP).cleaner_offset > 0
    # Compaction leaves gaps in offsets by design; Kafka finds nothing else.
    assert [error for error in checks.errors if "Non-consecutive offsets" not in error] == []
    assert checks.batches and all(batch.is_valid for batch in checks.batches)
    assert any(dump.passed_sanity_check for dump in checks.files)


def test_kafka_reads_what_the_tier_serves(
    cleaned: tuple[LocalDirectoryStore, Path, DumpOutput],
) -> None:
    store, _directory, checks = cleaned
    served = b"".join(
        read_part(store, segment, SegmentPart.LOG)
        for segment in load_view(store, TP).all_segments()
    )
    headers = list(iter_batches(served))
    assert [(b.base_offset, b.last_offset, b.count) for b in checks.batches] == [
        (h.base_offset, h.last_offset, h.record_count) for h in headers
    ]
    keys = [record.key for record in checks.records]
    assert len(keys) == len(set(keys)) == 30  # one record a key: the latest
    assert sum(record.value_size == -1 for record in checks.records) == 5  # tombstones kept
