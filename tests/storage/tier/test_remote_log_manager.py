"""The remote log manager against a real local-directory store, with failures injected
by ``FaultyStore`` at chosen calls (the store's behaviour itself is never imitated)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.storage.conftest import FakeClock, make_batch, make_records, read_all_bytes
from tests.storage.tier.faults import FaultyStore
from tests.storage.tier.s3_requests import Recorder
from tests.storage.tier.tiering import (
    BATCH,
    STORE_KINDS,
    TIERED,
    TP,
    both_stores,
    last_offsets,
    minio_store,
    open_log,
    produce,
    tier_bytes,
    tier_offsets,
    tiered_config,
)
from tests.support.minio import MinioServer
from tierlog.storage.errors import (
    InvalidConfigError,
    KafkaStorageError,
    OffsetMovedToTieredStorageError,
)
from tierlog.storage.log import Log
from tierlog.storage.records import build_batch
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.layout import chunks_prefix, manifest_key, segments_prefix
from tierlog.storage.tier.manifest import PartitionManifest, SegmentState
from tierlog.storage.tier.manifest_chunks import seal
from tierlog.storage.tier.manifest_store import ManifestWriter, load_manifest, load_view
from tierlog.storage.tier.observer import TierObserver
from tierlog.storage.tier.range_reader import RangeReader
from tierlog.storage.tier.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.tier.store import ObjectStore, ObjectStoreUnavailableError
from tierlog.storage.topic_partition import TopicPartition

# Chunks of 2 entries: a manifest seals its oldest entries into chunks from 4 segments on.
CONFIG = RemoteLogManagerConfig(
    retry_backoff_ms=1000,
    retry_backoff_max_ms=8000,
    abandon_upload_ms=60_000,
    threads=2,
    manifest_chunk_entries=2,
)


class Counting(TierObserver):
    def __init__(self) -> None:
        self.uploaded: list[int] = []
        self.failed: list[str] = []
        self.deleted = 0

    def segment_uploaded(self, tp: object, size_bytes: int, seconds: float) -> None:
        self.uploaded.append(size_bytes)

    def upload_failed(self, tp: object, reason: str) -> None:
        self.failed.append(reason)

    def segments_deleted(self, tp: object, segments: int, size_bytes: int) -> None:
        self.deleted += segments


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    yield from both_stores(request, tmp_path)


@pytest.fixture
def log(tmp_path: Path, clock: FakeClock) -> Iterator[Log]:
    opened = open_log(tmp_path / "data", clock)
    yield opened
    opened.close()


def manager(
    store: ObjectStore, clock: FakeClock, observer: TierObserver | None = None
) -> RemoteLogManager:
    return RemoteLogManager(store, CONFIG, clock_ms=clock, observer=observer)


def stored_keys(store: ObjectStore) -> list[str]:
    return [info.key for info in store.list(segments_prefix(TP))]


def manifest_keys(store: ObjectStore) -> list[str]:
    """The segment objects the manifest names: the head's entries and the live ones."""
    named = {s.key for s in load_manifest(store, TP).segments}
    return sorted(named | {s.key for s in load_view(store, TP).all_segments()})


def test_closed_segments_go_to_the_tier_oldest_first(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    observer = Counting()
    rlm = manager(store, clock, observer)
    rlm.attach(TP, log)
    produce(log, 10)  # segments [0,12) [12,24) and the active [24,30)
    rlm.run_once()
    assert tier_offsets(store) == [(0, 12), (12, 24)]
    assert tier_bytes(store) == read_all_bytes(log, 0)[: sum(s.size for s in log.segments[:2])]
    assert log.tiered_end_offset == 24 and log.recovery_point >= 24
    assert len(observer.uploaded) == 2
    assert rlm.upload_lag(TP).segments == 0
    rlm.run_once()  # nothing new: nothing uploaded twice
    assert len(stored_keys(store)) == 2


def test_only_segments_below_the_committed_end_are_uploaded(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    """Under replication the committed end is the high watermark: a segment holding
    offsets the followers may lack waits, so a new leader's log holds the whole tier."""
    rlm = manager(store, clock)
    rlm.committed_end = lambda _tp, partition_log: partition_log.high_watermark
    rlm.attach(TP, log)
    produce(log, 10)  # segments [0,12) [12,24) and the active [24,30)
    log.update_high_watermark(23)
    rlm.run_once()
    assert tier_offsets(store) == [(0, 12)] and log.tiered_end_offset == 12
    assert rlm.upload_lag(TP).segments == 0  # nothing it may upload waits
    log.update_high_watermark(24)
    rlm.run_once()
    assert tier_offsets(store) == [(0, 12), (12, 24)]


def test_local_retention_frees_only_tiered_segments(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    rlm = manager(store, clock)
    rlm.attach(TP, log)
    produce(log, 10)
    whole = read_all_bytes(log)
    assert log.delete_old_segments(is_tiered=lambda s: s.next_offset <= log.tiered_end_offset) == 0
    rlm.run_once()
    retired = log.delete_old_segments(is_tiered=lambda s: s.next_offset <= log.tiered_end_offset)
    assert retired == 2
    assert log.log_start_offset == 0 and log.local_log_start_offset == 24
    with pytest.raises(OffsetMovedToTieredStorageError):
        log.read(5, 1000)
    assert tier_bytes(store) + read_all_bytes(log, 24) == whole


def test_upload_lag_counts_closed_segments_not_yet_tiered(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    rlm = manager(store, clock)
    rlm.attach(TP, log)
    produce(log, 10)
    lag = rlm.upload_lag(TP)
    assert lag.segments == 2 and lag.size_bytes == sum(s.size for s in log.segments[:2])


def test_a_quiet_partition_is_rolled_and_tiered_within_the_roll_interval(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    rlm = manager(store, clock)
    rlm.attach(TP, log)
    produce(log, 2)  # 6 offsets in the active segment, never filling it
    rlm.run_once()
    assert tier_offsets(store) == []
    clock.advance(CONFIG.segment_roll_ms)
    rlm.run_once()
    assert tier_offsets(store) == [(0, 6)]
    assert log.active_segment.base_offset == 6 and log.active_segment.size == 0
    clock.advance(CONFIG.segment_roll_ms)
    rlm.run_once()  # an empty active segment is not rolled
    assert log.active_segment.base_offset == 6


# A topic's tierlog.remote.segment.max.upload.interval.ms (the passes run every 30 s).
BOUND_MS = 60_000


def bounded(log: Log) -> None:
    log.update_config(tiered_config(tierlog_remote_segment_max_upload_interval_ms=BOUND_MS))


def test_an_idle_partition_is_tiered_within_its_max_upload_interval(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    """Records wait in the active segment the bound less one pass, counted from their
    append (not from the segment's creation): rolled then, they are in the tier before
    the bound runs out; a partition wholly in the tier rolls nothing more."""
    bounded(log)
    rlm = manager(store, clock)
    rlm.attach(TP, log)
    clock.advance(3_600_000)  # the active segment is an hour old, its records will not be
    produce(log, 2)  # 6 offsets, never filling the segment
    waited_ms = BOUND_MS - CONFIG.task_interval_ms - 1
    clock.advance(waited_ms)
    rlm.run_once()
    assert tier_offsets(store) == [] and len(log.segments) == 1
    lag = rlm.upload_lag(TP)
    assert (lag.offsets, lag.age_ms, lag.bound_ms) == (6, waited_ms, BOUND_MS)
    clock.advance(1)
    rlm.run_once()
    assert tier_offsets(store) == [(0, 6)]
    lag = rlm.upload_lag(TP)
    assert (lag.offsets, lag.age_ms) == (0, 0)
    bases = [segment.base_offset for segment in log.segments]
    clock.advance(10 * BOUND_MS)
    rlm.run_once()
    assert [segment.base_offset for segment in log.segments] == bases  # no empty segment
    assert len(stored_keys(store)) == 1


def test_the_bound_rolls_no_segment_before_its_records_may_be_uploaded(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    """Under replication only records below the high watermark go to the tier: a segment
    holding none is left to grow (rolled at each pass it would leave a trail of tiny
    segments while the followers lag), one holding some is rolled and uploaded once
    committed to its end."""
    bounded(log)
    rlm = manager(store, clock)
    rlm.committed_end = lambda _tp, partition_log: partition_log.high_watermark
    rlm.attach(TP, log)
    produce(log, 2)
    clock.advance(10 * BOUND_MS)
    rlm.run_once()
    assert len(log.segments) == 1 and tier_offsets(store) == []
    log.update_high_watermark(3)
    rlm.run_once()
    assert [segment.base_offset for segment in log.segments] == [0, 6]
    assert tier_offsets(store) == []
    log.update_high_watermark(6)
    rlm.run_once()
    assert tier_offsets(store) == [(0, 6)]


def test_a_new_leader_whose_active_segment_ends_at_the_tier_end_rolls_there(
    tmp_path: Path, store: ObjectStore, clock: FakeClock
) -> None:
    """A follower learns of a roll its leader made for the bound only with the records
    after it; taking over before, it rolls where the tier ends, so what it appends next
    is uploaded alone and nothing the tier holds is uploaded again."""
    logs = [open_log(tmp_path / name, clock) for name in ("leader", "follower")]
    for partition_log in logs:
        bounded(partition_log)
        produce(partition_log, 2)  # the same batches at the same offsets
    leader, follower = logs
    first = manager(store, clock)
    first.attach(TP, leader)
    clock.advance(BOUND_MS)
    first.run_once()
    assert tier_offsets(store) == [(0, 6)] and len(follower.segments) == 1
    successor = manager(store, clock)
    successor.attach(TP, follower)
    assert [segment.base_offset for segment in follower.segments] == [0, 6]
    produce(follower, 2, start=2)
    clock.advance(BOUND_MS)
    successor.run_once()
    assert tier_offsets(store) == [(0, 6), (6, 12)]
    assert stored_keys(store) == manifest_keys(store) and len(stored_keys(store)) == 2
    for partition_log in logs:
        partition_log.close()


def test_producer_snapshots_the_uploader_needs_are_kept(log: Log) -> None:
    for batch in range(40):  # ten rolls, each below the recovery point, nothing tiered
        produce(log, 1, start=batch)
        log.flush()
    snapshots = log.producer_state.snapshot_offsets
    assert snapshots == list(range(12, 120, 12))  # one per roll, none pruned
    log.tiered_end_offset = 60  # the uploader has what lies below 60
    produce(log, 4, start=40)
    log.flush()
    kept = log.producer_state.snapshot_offsets
    assert kept == [60, 72, 84, 96, 108, 120]  # below 60 pruned as usual (newest two kept)


class Crash(BaseException):
    """The process dies here: no clean-up runs."""


def test_a_crash_between_the_phases_leaves_nothing_readable_and_the_sweep_cleans_up(
    tmp_path: Path, log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    produce(log, 5)
    faulty = FaultyStore(store)
    crashing = manager(faulty, clock)
    crashing.attach(TP, log)
    segment_put_seen: list[str] = []

    def before_finish(op: str, key: str) -> bool:
        """The first manifest put after the segment object's put: "finished"."""
        if op == "put" and "/segments/" in key:
            segment_put_seen.append(key)
            return False
        return op == "put" and bool(segment_put_seen)

    faulty.fail(before_finish).error = Crash
    with pytest.raises(Crash):
        crashing.run_once()
    manifest = load_manifest(store, TP)
    assert [s.state for s in manifest.segments] == [SegmentState.STARTED]
    assert tier_offsets(store) == []  # nothing readable
    assert len(stored_keys(store)) == 1  # the object landed, unfinished
    assert log.tiered_end_offset == 0
    assert log.delete_old_segments(is_tiered=lambda s: s.next_offset <= log.tiered_end_offset) == 0

    # The restarted process: a new writer; its sweep only takes leftovers past the timeout.
    restarted = manager(store, clock)
    restarted.attach(TP, log)
    restarted.run_once()
    assert tier_offsets(store) == [(0, 12)]
    assert len(stored_keys(store)) == 2  # the leftover is young: kept for now
    clock.advance(CONFIG.abandon_upload_ms + CONFIG.sweep_interval_ms)
    restarted.run_once()
    assert stored_keys(store) == manifest_keys(store)
    states = {s.state for s in load_manifest(store, TP).segments}
    assert states == {SegmentState.FINISHED}  # (the idle roll tiered the rest meanwhile)


def test_an_outage_mid_upload_is_retried_with_backoff_and_deletes_nothing_locally(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    faulty = FaultyStore(store)
    observer = Counting()
    rlm = manager(faulty, clock, observer)
    rlm.attach(TP, log)
    produce(log, 10)
    whole = read_all_bytes(log)
    faulty.fail(lambda op, key: op == "put" and "/segments/" in key, times=-1)
    rlm.run_once()
    assert observer.failed == ["KAFKA_STORAGE_ERROR"]
    assert tier_offsets(store) == [] and log.tiered_end_offset == 0
    assert log.delete_old_segments(is_tiered=lambda s: s.next_offset <= log.tiered_end_offset) == 0
    faulty.heal()
    faulty.outage()  # now the whole store is down, the manifest too
    clock.advance(CONFIG.retry_backoff_ms)
    rlm.run_once()
    attempts = len(faulty.calls)
    rlm.run_once()  # within the (doubled) backoff: not even tried
    assert len(faulty.calls) == attempts
    faulty.heal()
    clock.advance(CONFIG.retry_backoff_max_ms)
    rlm.run_once()
    assert tier_offsets(store) == [(0, 12), (12, 24)]  # caught up, no duplicate or half one
    assert tier_bytes(store) == whole[: len(tier_bytes(store))]
    assert log.delete_old_segments(is_tiered=lambda s: s.next_offset <= log.tiered_end_offset) == 2
    assert stored_keys(store) == manifest_keys(store)  # the failed attempt cleaned up at once


def test_a_failed_clean_up_is_left_to_the_sweep(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    faulty = FaultyStore(store)
    rlm = manager(faulty, clock)
    rlm.attach(TP, log)
    produce(log, 5)
    # The object lands but its PUT reports a failure, and the store is down from then on.
    landed: list[str] = []

    def object_put(op: str, key: str) -> bool:
        if op == "put" and "/segments/" in key:
            landed.append(key)
            return True
        return False

    faulty.fail(object_put, after=True)
    faulty.fail(lambda _op, _key: bool(landed), times=-1)
    rlm.run_once()
    assert tier_offsets(store) == []
    assert len(stored_keys(store)) == 1
    assert [s.state for s in load_manifest(store, TP).segments] == [SegmentState.STARTED]
    faulty.heal()
    clock.advance(CONFIG.abandon_upload_ms + CONFIG.sweep_interval_ms)
    rlm.run_once()
    assert tier_offsets(store) == [(0, 12), (12, 15)]  # the idle roll took the rest
    assert stored_keys(store) == manifest_keys(store)
    assert ("abort", landed[0]) in faulty.calls  # its multipart upload asked for by key


def test_total_retention_deletes_from_the_tier_and_moves_the_log_start(
    tmp_path: Path, store: ObjectStore, clock: FakeClock
) -> None:
    log = open_log(tmp_path / "data", clock, tiered_config(retention_bytes=30 * 24))
    observer = Counting()
    rlm = manager(store, clock, observer)
    rlm.attach(TP, log)
    produce(log, 16)  # segments [0,12) [12,24) [24,36) [36,48)
    rlm.run_once()
    segment_bytes = log.segments[0].size
    log.update_config(tiered_config(retention_bytes=2 * segment_bytes))
    rlm.run_once()
    assert tier_offsets(store) == [(24, 36)]
    assert log.log_start_offset == 24 and load_manifest(store, TP).log_start_offset == 24
    assert stored_keys(store) == manifest_keys(store) and len(stored_keys(store)) == 1
    assert observer.deleted == 2
    log.close()


def test_time_retention_deletes_expired_remote_segments(
    tmp_path: Path, store: ObjectStore, clock: FakeClock
) -> None:
    log = open_log(tmp_path / "data", clock, tiered_config(retention_ms=1000))
    rlm = manager(store, clock)
    rlm.attach(TP, log)
    produce(log, 8)
    rlm.run_once()  # uploads [0,12), nothing has expired yet
    assert tier_offsets(store) == [(0, 12)]
    clock.advance(10_000)
    produce(log, 4, start=8)
    rlm.run_once()
    assert tier_offsets(store) == []
    assert load_manifest(store, TP).log_start_offset >= 24
    log.close()


def test_delete_records_removes_remote_segments_below_the_new_start(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    rlm = manager(store, clock)
    rlm.attach(TP, log)
    produce(log, 16)
    rlm.run_once()
    assert tier_offsets(store) == [(0, 12), (12, 24), (24, 36)]
    log.increment_log_start_offset(25)
    rlm.run_once()
    assert tier_offsets(store) == [(24, 36)]
    view_start = load_manifest(store, TP).view().log_start_offset
    assert view_start == 25
    assert stored_keys(store) == manifest_keys(store)


def test_a_deletion_interrupted_by_an_outage_finishes_on_the_next_pass(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    faulty = FaultyStore(store)
    rlm = manager(faulty, clock)
    rlm.attach(TP, log)
    produce(log, 16)
    rlm.run_once()
    log.increment_log_start_offset(24)
    faulty.fail(lambda op, key: op == "delete", times=-1)
    rlm.run_once()
    manifest = load_manifest(store, TP)
    assert (manifest.log_start_offset, manifest.deleted_end_offset) == (24, 0)
    assert len(stored_keys(store)) == 3  # their objects are still there
    assert tier_offsets(store) == [(24, 36)]  # readers no longer see them
    faulty.heal()
    clock.advance(CONFIG.retry_backoff_max_ms)
    rlm.run_once()
    assert stored_keys(store) == manifest_keys(store) and len(stored_keys(store)) == 1


def test_a_new_owner_fences_the_old_one(
    tmp_path: Path, log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    old = manager(store, clock)
    old.attach(TP, log)
    produce(log, 6)
    old.run_once()
    new_log = open_log(tmp_path / "other", clock)
    new = manager(store, clock)
    new.attach(TP, new_log)  # continues at the tier's end
    assert (new_log.log_start_offset, new_log.log_end_offset) == (0, 12)
    produce(log, 6, start=6)
    old.run_once()  # deposed: uploads nothing more, deletes nothing
    assert tier_offsets(store) == [(0, 12)]
    assert load_manifest(store, TP).writer_epoch == 2
    produce(new_log, 5)
    new.run_once()
    assert tier_offsets(store) == [(0, 12), (12, 24)]
    new_log.close()


def test_an_empty_volume_continues_at_the_tiers_end_with_its_producers(
    tmp_path: Path, store: ObjectStore, clock: FakeClock
) -> None:
    def idempotent_batch(sequence: int) -> bytes:
        records = make_records(3, tag=f"s{sequence}")
        return build_batch(records, producer_id=77, producer_epoch=0, base_sequence=sequence)

    first = open_log(tmp_path / "pod-a", clock)
    rlm = manager(store, clock)
    rlm.attach(TP, first)
    for sequence in range(0, 30, 3):
        first.append(idempotent_batch(sequence))
    rlm.run_once()
    first.increment_log_start_offset(2)
    rlm.run_once()
    tier_end = load_manifest(store, TP).end_offset
    assert tier_end >= 12
    whole = read_all_bytes(first)
    first.close()

    replaced = open_log(tmp_path / "pod-b", clock)
    manager(store, clock).attach(TP, replaced)
    assert (replaced.log_start_offset, replaced.log_end_offset) == (2, tier_end)
    assert tier_bytes(store) == whole[: len(tier_bytes(store))]
    assert last_offsets(tier_bytes(store))[-1] == tier_end - 1
    retry = replaced.append(idempotent_batch(tier_end - 3))  # the tier's last batch again
    assert retry.duplicate and retry.first_offset == tier_end - 3  # its producer came along
    fresh = replaced.append(idempotent_batch(tier_end))
    assert fresh.first_offset == tier_end and not fresh.duplicate
    replaced.close()


def test_a_store_down_at_attach_refuses_the_partition(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    faulty = FaultyStore(store)
    faulty.outage()
    with pytest.raises(ObjectStoreUnavailableError):
        manager(faulty, clock).attach(TP, log)


def test_config_from_kafka_named_keys() -> None:
    config = RemoteLogManagerConfig.from_properties(
        {"remote.log.segment.roll.ms": "60000", "remote.log.manager.thread.pool.size": "8"}
    )
    assert (config.segment_roll_ms, config.threads) == (60_000, 8)
    for bad in ({"remote.log.manager.thread.pool.size": "0"}, {"remote.log.segment.roll.ms": "x"}):
        with pytest.raises(InvalidConfigError):
            RemoteLogManagerConfig.from_properties(bad)


def test_minio_stopped_in_the_middle_of_uploads_then_back(
    tmp_path: Path, log: Log, minio: MinioServer, s3_bucket: str, clock: FakeClock
) -> None:
    """A real outage: MinIO is stopped just before the second segment's PUT (its
    ``started`` entry is written) and started again later."""
    store = minio_store(minio, s3_bucket, tmp_path)
    puts: list[str] = []

    def second_segment_put(op: str, key: str) -> bool:
        if op == "put" and "/segments/" in key:
            puts.append(key)
            if len(puts) == 2:
                minio.stop()
        return False

    faulty = FaultyStore(store)
    faulty.fail(second_segment_put, times=-1)
    observer = Counting()
    rlm = manager(faulty, clock, observer)
    rlm.attach(TP, log)
    produce(log, 13)  # three closed segments and the active one
    whole = read_all_bytes(log)
    try:
        rlm.run_once()
        assert observer.failed == ["KAFKA_STORAGE_ERROR"]
        assert log.tiered_end_offset == 12  # the first landed, nothing after it
        retired = log.delete_old_segments(
            is_tiered=lambda s: s.next_offset <= log.tiered_end_offset
        )
        assert retired == 1 and log.local_log_start_offset == 12
        clock.advance(CONFIG.retry_backoff_ms)
        rlm.run_once()  # still down: retried, failed again, nothing changes
        assert log.tiered_end_offset == 12 and len(observer.uploaded) == 1
    finally:
        minio.start()
    assert tier_offsets(store) == [(0, 12)]  # no half or duplicate segment visible
    clock.advance(CONFIG.retry_backoff_max_ms)
    rlm.run_once()
    assert tier_offsets(store) == [(0, 12), (12, 24), (24, 36)]  # caught up
    assert tier_bytes(store) == whole[: len(tier_bytes(store))]
    clock.advance(CONFIG.abandon_upload_ms + CONFIG.sweep_interval_ms)
    rlm.run_once()  # the stranded attempt's leftovers are swept
    assert stored_keys(store) == manifest_keys(store)
    assert {s.state for s in load_manifest(store, TP).segments} == {SegmentState.FINISHED}
    store.close()


def test_a_reader_in_the_same_process_sees_each_change_at_once(
    tmp_path: Path, store: ObjectStore, clock: FakeClock
) -> None:
    log = open_log(tmp_path / "data", clock, tiered_config(retention_bytes=-1))
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=4096, max_bytes=1 << 20, max_entries=100)
    reads = FaultyStore(store)  # the reader's requests, counted
    reader = RemoteLogReader(RangeReader(reads, cache), view_ttl_s=3600, clock_s=lambda: 0.0)
    rlm = manager(store, clock)
    rlm.on_manifest_change(reader.offer)
    rlm.attach(TP, log)
    assert reader.view(TP).end_offset == 0  # cached for an hour
    reads.calls.clear()
    produce(log, 10)
    rlm.run_once()
    assert reader.view(TP).end_offset == 24
    assert reader.view(TP) == load_view(store, TP)  # an upload: the writer's view
    log.increment_log_start_offset(12)
    rlm.run_once()
    view = reader.view(TP)  # a deletion too
    assert (view.log_start_offset, [s.base_offset for s in view.all_segments()]) == (12, [12])
    assert view == load_view(store, TP)
    assert reads.calls == []  # neither was loaded: no listing, no head's GET
    assert reader.read(TP, 12, 1 << 20)
    assert not [key for _operation, key in reads.calls if "/manifest/" in key]
    reader.ranges.close()
    log.close()


def test_a_tier_of_many_segments_in_chunks_uploads_deletes_sweeps_and_restores(
    tmp_path: Path, store: ObjectStore, clock: FakeClock
) -> None:
    log = open_log(tmp_path / "data", clock)
    rlm = manager(store, clock)
    rlm.attach(TP, log)
    produce(log, 60)  # 15 segments of 12 offsets, 14 closed
    whole = read_all_bytes(log)
    rlm.run_once()
    manifest = load_manifest(store, TP)
    assert max(ref.level for ref in manifest.chunks) == 2  # chunks of chunks
    assert len(manifest.segments) < 4  # the head keeps only the newest entries
    assert tier_offsets(store) == [(base, base + 12) for base in range(0, 168, 12)]
    assert tier_bytes(store) == whole[: len(tier_bytes(store))]

    log.increment_log_start_offset(50)  # DeleteRecords into the fifth segment
    rlm.run_once()
    assert tier_offsets(store)[0] == (48, 60) and stored_keys(store) == manifest_keys(store)
    log.update_config(tiered_config(retention_bytes=6 * log.segments[0].size))
    rlm.run_once()  # six segments' bytes: five in the tier and the full active one
    assert [base for base, _ in tier_offsets(store)] == list(range(108, 168, 12))
    assert load_manifest(store, TP).log_start_offset == 108 == log.log_start_offset
    assert stored_keys(store) == manifest_keys(store)
    clock.advance(CONFIG.abandon_upload_ms + CONFIG.sweep_interval_ms)
    rlm.run_once()  # the sweep finds nothing to take: every object is named
    assert stored_keys(store) == manifest_keys(store)
    assert [base for base, _ in tier_offsets(store)] == list(range(108, 180, 12))  # idle roll
    chunks = [info.key for info in store.list(chunks_prefix(TP))]
    assert chunks and all(ref.key in chunks for ref in load_manifest(store, TP).chunks)

    replaced = open_log(tmp_path / "pod-b", clock)
    manager(store, clock).attach(TP, replaced)
    assert (replaced.log_start_offset, replaced.log_end_offset) == (108, 180)
    log.close()
    replaced.close()


def test_the_sweep_removes_chunks_no_head_reaches(
    tmp_path: Path, log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    clock.now_ms = int(time.time() * 1000)  # objects age by the store's clock
    rlm = manager(store, clock)
    rlm.attach(TP, log)
    produce(log, 24)  # 5 closed segments: the oldest in a chunk
    rlm.run_once()
    manifest = load_manifest(store, TP)
    assert len(manifest.chunks) == 1
    # A chunk sealed by a change whose head never landed (a crash), which no head names.
    _head, (lost,) = seal(
        PartitionManifest(TP, segments=load_view(store, TP).all_segments()[1:]), 2
    )
    assert lost.ref.key != manifest.chunks[0].key
    store.put(lost.ref.key, lost.body)
    clock.advance(CONFIG.abandon_upload_ms + CONFIG.sweep_interval_ms)
    rlm.run_once()
    kept = [info.key for info in store.list(chunks_prefix(TP))]
    assert lost.ref.key not in kept and kept == [ref.key for ref in load_manifest(store, TP).chunks]
    assert stored_keys(store) == manifest_keys(store)


@pytest.mark.slow
def test_the_sweep_aborts_a_multipart_upload_left_before_a_minio_restart(
    tmp_path: Path, minio: MinioServer, s3_bucket: str, clock: FakeClock
) -> None:
    """MinIO lists a bucket's multipart uploads from memory (a restart forgets them) and
    by Prefix only for an exact key: the sweep must ask by each abandoned entry's key."""
    clock.now_ms = int(time.time() * 1000)
    config = tiered_config(segment_bytes=12 << 20)
    log = open_log(tmp_path / "data", clock, config)
    for batch in range(14):  # one closed segment of ~12 MiB: a multipart upload in 5 MiB parts
        log.append(make_batch(1000, value_size=1000, tag=f"{batch:02d}"))
    first_end = log.segments[0].next_offset
    slow = minio_store(minio, s3_bucket, tmp_path, rate=2 << 20, part=5 << 20)
    rlm = manager(slow, clock)
    rlm.attach(TP, log)
    failed: list[BaseException] = []
    passing = threading.Thread(target=lambda: run_catching(rlm, failed))
    passing.start()
    client, deadline = minio.client(), time.monotonic() + 30
    while not client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads"):
        assert time.monotonic() < deadline, "the multipart upload never started"
        time.sleep(0.05)
    minio.kill()  # mid-upload: neither the upload nor its clean-up can finish
    passing.join(timeout=60)
    minio.start()
    assert failed == []  # the pass failed inside, and backs off
    (entry,) = load_manifest(slow, TP).in_state(SegmentState.STARTED)
    full_key = f"tier/{entry.key}"
    assert client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []  # forgotten
    assert client.list_multipart_uploads(Bucket=s3_bucket, Prefix=full_key)["Uploads"]
    assert slow.abort_incomplete_uploads(segments_prefix(TP), older_than_s=0) == 0  # missed

    clock.advance(CONFIG.abandon_upload_ms + CONFIG.sweep_interval_ms)
    rlm.run_once()  # uploads the segment again, then sweeps the abandoned attempt
    assert client.list_multipart_uploads(Bucket=s3_bucket, Prefix=full_key).get("Uploads", []) == []
    assert load_manifest(slow, TP).in_state(SegmentState.STARTED) == ()
    assert tier_offsets(slow)[0] == (0, first_end) and log.tiered_end_offset == 14 * 1000
    assert stored_keys(slow) == manifest_keys(slow)
    slow.close()
    log.close()


@pytest.mark.slow
def test_one_sweep_lists_the_multipart_uploads_once_for_all_partitions(
    tmp_path: Path, minio: MinioServer, s3_bucket: str, clock: FakeClock
) -> None:
    """An upload no entry names (its attempt's entry already dropped) is found by the
    store-wide step of the sweep, which lists the bucket once however many partitions."""
    config = replace(CONFIG, abandon_upload_ms=5000)  # uploads age by MinIO's own clock
    recorder = Recorder()
    store = minio_store(minio, s3_bucket, tmp_path, observer=recorder)
    rlm = RemoteLogManager(store, config, clock_ms=clock)
    partitions = [TopicPartition("swept", n) for n in range(5)]
    logs = [Log.open(tmp_path / tp.dir_name, tiered_config(), clock_ms=clock) for tp in partitions]
    for tp, partition_log in zip(partitions, logs, strict=True):
        rlm.attach(tp, partition_log)
    client = minio.client()
    stray = f"tier/{segments_prefix(partitions[3])}00000000000000000000-e1-stray"
    other_cluster = "elsewhere/segments/stray"
    for key in (stray, other_cluster):
        client.create_multipart_upload(Bucket=s3_bucket, Key=key)

    def uploads() -> list[str]:
        return [u["Key"] for u in client.list_multipart_uploads(Bucket=s3_bucket)["Uploads"]]

    rlm.run_once()  # every partition's first sweep: the upload is too young to abort
    assert recorder.count("ListMultipartUploads") == 2  # the bucket's and the root's, once
    assert sorted(uploads()) == sorted([stray, other_cluster])
    time.sleep(5.5)
    rlm.run_once()  # the sweep is not due again yet: nothing listed
    assert recorder.count("ListMultipartUploads") == 2
    clock.advance(config.sweep_interval_ms)
    rlm.run_once()
    assert recorder.count("ListMultipartUploads") == 4
    assert uploads() == [other_cluster]  # outside the store's root: not ours to abort
    for partition_log in logs:
        partition_log.close()
    store.close()


def run_catching(rlm: RemoteLogManager, failed: list[BaseException]) -> None:
    try:
        rlm.run_once()
    except BaseException as error:
        failed.append(error)


def is_tiered_by(log: Log) -> Callable[[LogSegment], bool]:
    return lambda segment: segment.next_offset <= log.tiered_end_offset


def test_a_vanished_manifest_stops_the_partition_until_a_rebase(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    """The store loses everything (a recreated bucket): no manifest is written from
    memory, local segments stay, and a fresh manifest (an operator's rebase) lets the
    partition go on from its local log, the lost offsets gone."""
    rlm = manager(store, clock)
    rlm.attach(TP, log)
    produce(log, 10)  # [0,12) [12,24) tiered; the active [24,30)
    rlm.run_once()
    assert log.delete_old_segments(is_tiered=is_tiered_by(log)) == 2  # local start 24
    store.delete([info.key for info in list(store.list(""))])
    produce(log, 8, start=10)  # [24,36) [36,48) closed
    clock.advance(CONFIG.retry_backoff_max_ms)
    rlm.run_once()
    (problem,) = rlm.problems()
    assert (problem.tp, problem.state) == (TP, "manifest_vanished")
    assert list(store.list("")) == []  # nothing written from memory
    assert log.tiered_end_offset == 24  # the local start: local retention frees nothing
    assert log.delete_old_segments(is_tiered=is_tiered_by(log)) == 0
    clock.advance(CONFIG.retry_backoff_max_ms)
    rlm.run_once()  # still no manifest: still stopped, nothing written
    assert [p.state for p in rlm.problems()] == ["manifest_vanished"]
    assert list(store.list("")) == []

    restarted = manager(store, clock)  # a restart meets the empty store: the same
    restarted.adopt(TP, log)
    restarted.run_once()
    assert [p.state for p in restarted.problems()] == ["manifest_vanished"]
    assert list(store.list("")) == []

    ManifestWriter(store, PartitionManifest(TP), "rebase").update(lambda m: m)  # the rebase
    clock.advance(CONFIG.retry_backoff_max_ms)
    rlm.run_once()
    assert rlm.problems() == []
    assert tier_offsets(store) == [(24, 36), (36, 48)]
    assert load_manifest(store, TP).writer_epoch > 1  # above the vanished writer's
    assert log.log_start_offset == 24  # offsets [0, 24) were only in the lost objects
    assert tier_bytes(store) == read_all_bytes(log, 24)[: sum(s.size for s in log.segments[:2])]


def test_a_garbled_newest_head_stops_other_writers_loudly_and_its_own_supersedes_it(
    log: Log, store: ObjectStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 29, item 10: a broker that did not write the garbled head (a restart, a new
    leader) uploads nothing and writes no version, logged at ERROR; the writer that
    stored it holds its content and its next change supersedes it, losing nothing."""
    rlm = manager(store, clock)
    rlm.attach(TP, log)
    produce(log, 10)  # [0,12) [12,24) tiered; the active [24,30)
    rlm.run_once()
    newest = load_manifest(store, TP).version
    garbled = manifest_key(TP, newest)
    store.put(garbled, b'{"format": 2, "top')
    produce(log, 8, start=10)  # [24,36) [36,48) closed
    stored = sorted(info.key for info in store.list(""))

    restarted = manager(store, clock)
    restarted.adopt(TP, log)
    restarted.run_once()
    (problem,) = restarted.problems()
    assert problem.state == "failing" and garbled in problem.detail
    assert sorted(info.key for info in store.list("")) == stored  # nothing written
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any(garbled in r.getMessage() for r in errors)

    rlm.run_once()  # the writer that stored it
    assert tier_offsets(store) == [(0, 12), (12, 24), (24, 36), (36, 48)]
    assert load_manifest(store, TP).version > newest


def test_a_segment_replaced_on_disk_before_its_put_is_not_uploaded_short(
    log: Log, store: ObjectStore, clock: FakeClock
) -> None:
    """The local cleaner of a compacted, tiered topic swaps a cleaned file in under the
    segment's name (``Log.replace_segments``) while its upload may be between measuring
    the segment and PUTting it: the object must be the bytes measured, or no object."""
    produce(log, 5)
    faulty = FaultyStore(store)
    first = log.segments[0]

    def swap_in_a_cleaned_file(op: str, key: str) -> bool:
        if op == "put" and "/segments/" in key and first.log.path.stat().st_size > 100:
            cleaned = first.log.path.with_suffix(".cleaned")
            cleaned.write_bytes(first.log.path.read_bytes()[: len(BATCH)])
            cleaned.replace(first.log.path)
        return False

    faulty.fail(swap_in_a_cleaned_file)
    rlm = manager(faulty, clock)
    rlm.attach(TP, log)
    rlm.run_once()
    for segment in load_view(store, TP).all_segments():  # every object is what it names
        assert store.size(segment.key) == segment.object_size_bytes
    assert rlm.problems()  # that upload failed, to be retried


def test_a_tier_turned_on_again_during_its_deletion_is_claimed_once_that_is_done(
    tmp_path: Path, store: ObjectStore, clock: FakeClock
) -> None:
    """KIP-950: deleting a tier turned off and claiming it turned on again never overlap:
    a claim in between would keep a manifest naming objects the deletion removes."""
    log = open_log(tmp_path / "data", clock)
    faulty = FaultyStore(store)
    rlm = RemoteLogManager(faulty, replace(CONFIG, task_interval_ms=3_600_000), clock_ms=clock)
    rlm.attach(TP, log)
    produce(log, 16)
    rlm.run_once()
    assert stored_keys(store)
    rlm.start(lambda: [(TP, log)])  # passes from here on look at the log's config
    log.update_config(
        tiered_config(remote_storage_enable="false", remote_log_delete_on_disable="true")
    )
    deleting, resume = threading.Event(), threading.Event()

    def pause_deletes(operation: str, _key: str) -> bool:
        if operation == "delete":
            deleting.set()
            resume.wait(30)
        return False  # then let it through

    faulty.fail(pause_deletes, times=-1)
    passing = threading.Thread(target=rlm.run_once)
    passing.start()
    assert deleting.wait(30)
    log.update_config(TIERED)  # turned on again while the deletion runs
    with pytest.raises(KafkaStorageError, match="being deleted"):
        rlm.attach(TP, log)
    resume.set()
    passing.join(30)
    faulty.heal()

    rlm.run_once()  # claims the tier anew and uploads the local segments again
    assert stored_keys(store) == manifest_keys(store) != []
    assert tier_offsets(store)[0][0] == 0
    rlm.stop()
    log.close()
