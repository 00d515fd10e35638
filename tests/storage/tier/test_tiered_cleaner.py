"""The tier's cleaner on a compacted, tiered topic, on a local-directory store and on
the session's MinIO: every key reads its latest value from the tier after a pass, the
tier holds fewer bytes, and a pass stopped at any step (``Crash``, raised where a
process would die) leaves a manifest that reads correctly, with its leftovers swept."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.storage.compaction import keyed_batch, latest_values
from tests.storage.conftest import FakeClock, headers_of
from tests.storage.tier.faults import FaultyStore
from tests.storage.tier.manifests import tier_view
from tests.storage.tier.test_manifest import remote_segment
from tests.storage.tier.tiering import STORE_KINDS, TP, both_stores, tiered_config
from tierlog.storage.cleaner import Cleaner
from tierlog.storage.cleaner_manager import CleanerConfig, LogCleaner
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import Record, decode_records
from tierlog.storage.tier import tiered_reads
from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.layout import chunks_prefix, segments_prefix
from tierlog.storage.tier.manifest import SegmentState
from tierlog.storage.tier.manifest_store import load_manifest, load_view
from tierlog.storage.tier.observer import TierObserver
from tierlog.storage.tier.range_reader import RangeReader
from tierlog.storage.tier.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.tiered_cleaner import TierCleaner, measure_tier
from tierlog.storage.topic_partition import TopicPartition
from tierlog.tools.tier_verify import VerifyReport, verify_partition

# Chunks of 2 entries: the tier's metadata is chunked from 4 segments on, so a swap
# rebuilds chunks too.
RLM = RemoteLogManagerConfig(abandon_upload_ms=60_000, threads=1, manifest_chunk_entries=2)
KEYS = 10
BATCHES = 120  # 5 updates a batch over KEYS keys: 600 updates
# Segments of about 8 batches; the local log keeps one closed segment beside the tier.
COMPACTED = tiered_config(
    cleanup_policy="compact",
    segment_bytes=8 * 160,
    local_retention_bytes=8 * 160,
    min_cleanable_dirty_ratio=0.01,
    delete_retention_ms=3_600_000,
    message_timestamp_after_max_ms=2**62,
)


class Crash(BaseException):
    """The process dies here: nothing after it runs."""


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    yield from both_stores(request, tmp_path)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(int(time.time() * 1000))  # objects age by the store's clock


@pytest.fixture
def ranges(store: ObjectStore, tmp_path: Path) -> Iterator[RangeReader]:
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=4096, max_bytes=1 << 24, max_entries=4096)
    reader = RangeReader(store, cache, threads=1)
    yield reader
    reader.close()


def produce_updates(log: Log, clock: FakeClock, batches: int, *, start: int = 0) -> None:
    """Batch i sets 5 of the KEYS keys to values naming i (the keys of a batch rotate)."""
    for i in range(start, start + batches):
        keys = [(i * 5 + n) % KEYS for n in range(5)]
        pairs = [(b"key-%d" % k, b"value-%d-%d" % (k, i)) for k in keys]
        log.append(keyed_batch(pairs, timestamp=clock.now_ms))
        clock.advance(10)


def expected_latest(batches: int) -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {}
    for i in range(batches):
        for n in range(5):
            k = (i * 5 + n) % KEYS
            latest[b"key-%d" % k] = b"value-%d-%d" % (k, i)
    return latest


def consume(log: Log, reader: RemoteLogReader) -> list[Record]:
    """Every record a consumer reading the whole log from its start gets (tier, then local)."""
    seen: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = tiered_reads.read(TP, log, reader, offset, 1 << 16).records
        headers = headers_of(data)
        seen += [record for header in headers for record in decode_records(data, header)]
        offset = headers[-1].last_offset + 1
    return seen


def tiered_records(store: ObjectStore, reader: RemoteLogReader) -> list[Record]:
    """Every record the tier alone serves, read through the reader."""
    reader.invalidate(TP)
    view = load_view(store, TP)
    seen: list[Record] = []
    offset = view.log_start_offset
    while data := reader.read(TP, offset, 1 << 16):
        headers = headers_of(data)
        seen += [record for header in headers for record in decode_records(data, header)]
        offset = headers[-1].last_offset + 1
    return seen


def tier_log_bytes(store: ObjectStore) -> int:
    return sum(segment.log_size_bytes for segment in load_view(store, TP).all_segments())


def named_objects(store: ObjectStore) -> set[str]:
    return {segment.key for segment in load_view(store, TP).all_segments()}


def stored_objects(store: ObjectStore) -> set[str]:
    return {info.key for info in store.list(segments_prefix(TP))}


class Tiered:
    """A compacted, tiered partition with its remote log manager and reader."""

    def __init__(self, tmp_path: Path, store: ObjectStore, ranges: RangeReader, clock: FakeClock):
        self.store, self.ranges, self.clock = store, ranges, clock
        self.scratch = tmp_path / "scratch"
        self.log = Log.open(tmp_path / "data" / TP.dir_name, COMPACTED, clock_ms=clock)
        self.rlm = self.manager(store)
        self.reader = RemoteLogReader(RangeReader(store, ranges.cache, threads=1))

    def manager(self, store: ObjectStore, cleaner: TierCleaner | None = None) -> RemoteLogManager:
        rlm = RemoteLogManager(store, RLM, clock_ms=self.clock)
        rlm.attach(TP, self.log)
        rlm.cleaner = cleaner
        return rlm

    def cleaner(self) -> TierCleaner:
        return TierCleaner(Cleaner(1 << 20), self.ranges, self.scratch)

    def tier_everything(self) -> None:
        """Upload every closed segment and free local disk down to one segment."""
        self.rlm.run_once()
        self.log.delete_old_segments(
            is_tiered=lambda s: s.next_offset <= self.log.tiered_end_offset
        )

    def close(self) -> None:
        self.reader.ranges.close()
        self.log.close()


@pytest.fixture
def tiered(
    tmp_path: Path, store: ObjectStore, ranges: RangeReader, clock: FakeClock
) -> Iterator[Tiered]:
    partition = Tiered(tmp_path, store, ranges, clock)
    produce_updates(partition.log, clock, BATCHES)
    partition.tier_everything()
    yield partition
    partition.close()


def test_a_pass_leaves_each_keys_latest_value_in_the_tier_and_fewer_bytes(
    tiered: Tiered, store: ObjectStore
) -> None:
    before = tier_log_bytes(store)
    view = load_view(store, TP)
    assert tiered.log.local_log_start_offset > view.log_start_offset  # most of it is tiered
    latest_tiered = latest_values(tiered_records(store, tiered.reader))

    tiered.rlm.cleaner = tiered.cleaner()
    tiered.rlm.run_once()

    assert tiered.rlm.cleaner.passes == 1
    cleaned = tiered_records(store, tiered.reader)
    assert latest_values(cleaned) == latest_tiered
    assert len({record.key for record in cleaned}) == len(cleaned)  # one record a key
    assert tier_log_bytes(store) * 5 < before
    assert latest_values(consume(tiered.log, tiered.reader)) == expected_latest(BATCHES)
    assert load_manifest(store, TP).cleaner_offset == view.end_offset
    assert stored_objects(store) == named_objects(store)  # the replaced objects are gone
    verified = VerifyReport()
    list(verify_partition(store, TP, verified))  # keys once in the cleaned range, and more
    assert verified.exit_code == 0, "\n".join(verified.summary_lines())

    # Nothing new to clean: the next pass swaps nothing.
    tiered.rlm.run_once()
    assert tiered.rlm.cleaner.passes == 1


def test_more_updates_are_cleaned_into_the_clean_tier(tiered: Tiered, store: ObjectStore) -> None:
    tiered.rlm.cleaner = tiered.cleaner()
    tiered.rlm.run_once()
    produce_updates(tiered.log, tiered.clock, BATCHES, start=BATCHES)
    tiered.tier_everything()  # uploads the new segments, then cleans them with the old
    assert tiered.rlm.cleaner.passes == 2
    cleaned = tiered_records(store, tiered.reader)
    assert len({record.key for record in cleaned}) == len(cleaned)
    assert latest_values(consume(tiered.log, tiered.reader)) == expected_latest(2 * BATCHES)


def crash_at(faulty: FaultyStore, step: str) -> None:
    """The process dies at ``step`` of a cleaning pass: the PUT of a cleaned object, the
    manifest change after such PUTs (the swap), or the deletes of replaced objects."""
    cleaned_puts: list[str] = []

    def matches(op: str, key: str) -> bool:
        if op == "put" and "/segments/" in key:
            cleaned_puts.append(key)
            return step == "upload"
        if step == "swap":
            return op == "put" and "/manifest/" in key and bool(cleaned_puts)
        return step == "delete" and op == "delete" and "/segments/" in key

    faulty.fail(matches).error = Crash


@pytest.mark.parametrize("step", ["upload", "swap"])
def test_a_crash_before_the_swap_leaves_the_tier_as_it_was_and_the_sweep_takes_the_orphans(
    tiered: Tiered, store: ObjectStore, step: str
) -> None:
    named = named_objects(store)
    served = tiered_records(store, tiered.reader)
    faulty = FaultyStore(store)
    crashing = tiered.manager(faulty, tiered.cleaner())
    crash_at(faulty, step)
    with pytest.raises(Crash):
        crashing.run_once()
    assert named_objects(store) == named
    assert tiered_records(store, tiered.reader) == served
    assert latest_values(consume(tiered.log, tiered.reader)) == expected_latest(BATCHES)
    orphans = stored_objects(store) - named
    assert bool(orphans) is (step == "swap")

    restarted = tiered.manager(store, tiered.cleaner())  # a new process claims the tier
    tiered.clock.advance(RLM.abandon_upload_ms + RLM.sweep_interval_ms)
    restarted.run_once()  # sweeps the orphans, then cleans the tier
    assert stored_objects(store) == named_objects(store)
    assert not named_objects(store) & named  # cleaned
    assert latest_values(consume(tiered.log, tiered.reader)) == expected_latest(BATCHES)


def test_a_crash_between_the_swap_and_the_deletes_serves_the_cleaned_tier_and_sweeps_the_rest(
    tiered: Tiered, store: ObjectStore
) -> None:
    replaced = named_objects(store)
    faulty = FaultyStore(store)
    crashing = tiered.manager(faulty, tiered.cleaner())
    crash_at(faulty, "delete")
    with pytest.raises(Crash):
        crashing.run_once()
    cleaned = tiered_records(store, tiered.reader)
    assert len({record.key for record in cleaned}) == len(cleaned)
    assert latest_values(consume(tiered.log, tiered.reader)) == expected_latest(BATCHES)
    assert replaced <= stored_objects(store)  # left behind by the crash, named by nothing
    assert not replaced & named_objects(store)

    restarted = tiered.manager(store, tiered.cleaner())
    tiered.clock.advance(RLM.abandon_upload_ms + RLM.sweep_interval_ms)
    restarted.run_once()
    assert stored_objects(store) == named_objects(store)
    assert {info.key for info in store.list(chunks_prefix(TP))} >= {
        ref.key for ref in load_manifest(store, TP).chunks
    }


def test_a_failed_swap_put_leaves_the_old_manifest_readable(
    tiered: Tiered, store: ObjectStore
) -> None:
    faulty = FaultyStore(store)
    named = named_objects(store)
    rlm = tiered.manager(faulty, tiered.cleaner())
    faulty.fail(lambda op, key: op == "put" and "/manifest/" in key, times=-1)
    rlm.run_once()  # the pass fails and is retried later; nothing local is lost
    assert rlm.problems()
    assert named_objects(store) == named
    assert latest_values(consume(tiered.log, tiered.reader)) == expected_latest(BATCHES)


def test_the_tiers_dirty_range_follows_the_local_cleaners_rules() -> None:
    """From the manifest's cleaner offset; ``min.compaction.lag.ms`` holds back the first
    segment with a younger record; the dirty ratio or ``max.compaction.lag.ms`` decide."""
    segments = [
        remote_segment(base, base + 10, state=SegmentState.FINISHED, max_timestamp=1000 + base)
        for base in range(0, 60, 10)
    ]
    view = tier_view(segments, chunk_entries=2)
    lagged = LogConfig.from_properties(
        {"min.compaction.lag.ms": 75, "min.cleanable.dirty.ratio": 0.5}, base=COMPACTED
    )
    dirt = measure_tier(view, 20, lagged, now_ms=1100)
    assert (dirt.first_dirty_offset, dirt.first_uncleanable_offset) == (20, 30)
    assert (dirt.clean_bytes, dirt.cleanable_bytes) == (200, 100)
    assert not dirt.needs_compaction_now and not dirt.worth_cleaning  # 1/3 < 0.5
    due = LogConfig.from_properties({"max.compaction.lag.ms": 50}, base=lagged)
    assert measure_tier(view, 20, due, now_ms=1100).worth_cleaning  # its first batch: 1010
    fresh = measure_tier(view, 10_000, COMPACTED, now_ms=1100)  # past the tier: from its start
    assert (fresh.first_dirty_offset, fresh.first_uncleanable_offset) == (0, 60)
    assert fresh.worth_cleaning


def test_tombstones_stay_in_the_tier_until_delete_retention_then_go(
    tiered: Tiered, store: ObjectStore
) -> None:
    log, clock = tiered.log, tiered.clock
    gone = [b"gone-0", b"gone-1"]  # keys no later update sets again
    log.append(keyed_batch([(key, b"doomed") for key in gone], timestamp=clock.now_ms))
    log.append(keyed_batch([(key, None) for key in gone], timestamp=clock.now_ms))
    produce_updates(log, clock, 16, start=BATCHES)  # the tombstones' segment closes
    tiered.rlm.cleaner = tiered.cleaner()
    tiered.tier_everything()
    assert tiered.rlm.cleaner.passes == 1
    kept = latest_values(tiered_records(store, tiered.reader))
    assert [kept[key] for key in gone] == [None, None]  # the tombstones are kept

    clock.advance(COMPACTED.delete_retention_ms + 1)
    produce_updates(log, clock, 16, start=BATCHES + 16)
    tiered.tier_everything()  # a pass past the tombstones' horizon
    assert tiered.rlm.cleaner.passes == 2
    assert not set(gone) & latest_values(tiered_records(store, tiered.reader)).keys()


def test_a_tier_with_an_upload_straddling_its_end_is_cleaned(
    tiered: Tiered, store: ObjectStore
) -> None:
    """The local cleaner merged a local copy of a tiered segment with segments not yet
    tiered (as a version whose local cleaner did not wait for the tier's claim after a
    start could); their upload overlaps the tier's end. The tier cleaner takes each
    offset once (the older copy, as readers do) and its swap accepts the overlap."""
    log = tiered.log
    produce_updates(log, tiered.clock, 24, start=BATCHES)
    tier_end, log.tiered_end_offset = log.tiered_end_offset, 0  # not known yet
    for _round in range(2):  # the second round merges the small cleaned segments
        Cleaner(1 << 20).clean(log, 0, log.active_segment.base_offset)
    log.tiered_end_offset = tier_end  # the claim
    tiered.rlm.run_once()
    ends = [(s.base_offset, s.end_offset) for s in load_view(store, TP).all_segments()]
    assert any(base < end for (_, end), (base, _) in itertools.pairwise(ends))

    tiered.rlm.cleaner = tiered.cleaner()
    tiered.rlm.run_once()
    assert tiered.rlm.cleaner.passes == 1
    cleaned = tiered_records(store, tiered.reader)
    assert len({record.key for record in cleaned}) == len(cleaned)
    assert latest_values(consume(log, tiered.reader)) == expected_latest(BATCHES + 24)


def test_the_local_cleaner_leaves_local_copies_of_tiered_segments_to_local_retention(
    tiered: Tiered, store: ObjectStore
) -> None:
    """A local copy of a tiered segment only waits for local retention, and the tier's
    cleaner cleans the tier: local rounds neither rewrite it nor merge it with segments
    not tiered yet, so the next upload starts at the tier's end and overlaps nothing."""
    log = tiered.log
    tier_end = log.tiered_end_offset
    copies = {
        s.log.path: s.log.path.stat().st_ino for s in log.segments if s.next_offset <= tier_end
    }
    assert copies  # local retention keeps one closed segment
    log_dir = log.directory.parent
    local = LogCleaner(CleanerConfig(enable=False), [log_dir], lambda: [(TP, log, log_dir)])
    local.startup()  # (not enabled: no threads; the rounds run here)

    for round_ in range(2):  # the second round would merge the first's small segments
        produce_updates(log, tiered.clock, 24, start=BATCHES + 24 * round_)
        assert local.clean_filthiest_log(local.new_cleaner())
        assert local.last_stats is not None
        assert local.last_stats.records_retained < local.last_stats.records_read
    assert {path: path.stat().st_ino for path in copies} == copies  # never rewritten
    assert all(s.next_offset <= tier_end or s.base_offset >= tier_end for s in log.segments)

    tiered.rlm.run_once()
    ends = [(s.base_offset, s.end_offset) for s in load_view(store, TP).all_segments()]
    assert all(end <= base for (_, end), (base, _) in itertools.pairwise(ends))
    assert latest_values(consume(log, tiered.reader)) == expected_latest(BATCHES + 48)


def test_after_a_restart_the_local_cleaner_waits_for_the_tiers_claim(
    tiered: Tiered, store: ObjectStore
) -> None:
    """Reopened, the log knows no tier's end (it reads 0) until the remote log manager
    claims the tier: no local round runs meanwhile, so none rewrites a local copy of a
    tiered segment; after the claim, rounds clean above the tier's end only."""
    produce_updates(tiered.log, tiered.clock, 24, start=BATCHES)
    tier_end = tiered.log.tiered_end_offset
    tiered.log.close()
    log = tiered.log = Log.open(tiered.log.directory, COMPACTED, clock_ms=tiered.clock)
    copies = {
        s.log.path: s.log.path.stat().st_ino for s in log.segments if s.next_offset <= tier_end
    }
    assert copies and log.segments[-2].next_offset > tier_end  # dirty, not tiered yet
    assert (log.tiered_end_offset, log.known_tiered_end_offset) == (0, -1)
    log_dir = log.directory.parent
    local = LogCleaner(CleanerConfig(enable=False), [log_dir], lambda: [(TP, log, log_dir)])
    local.startup()  # (not enabled: no threads; the rounds run here)
    assert not local.clean_filthiest_log(local.new_cleaner())

    tiered.rlm.attach(TP, log)  # the claim
    assert log.known_tiered_end_offset == tier_end
    assert local.clean_filthiest_log(local.new_cleaner())
    assert {path: path.stat().st_ino for path in copies} == copies  # never rewritten
    assert all(s.next_offset <= tier_end or s.base_offset >= tier_end for s in log.segments)


class PassRecorder(TierObserver):
    def __init__(self) -> None:
        self.passes: list[tuple[int, int]] = []  # (bytes read, bytes written)

    def tier_cleaned(
        self, tp: TopicPartition, bytes_read: int, bytes_written: int, bytes_removed: int
    ) -> None:
        self.passes.append((bytes_read, bytes_written))


def test_a_pass_draws_on_the_local_cleaners_throttle_and_keeps_its_dirty_bytes(
    tiered: Tiered, store: ObjectStore
) -> None:
    """The local cleaner's throttle (log.cleaner.io.max.bytes.per.second) holds a pass's
    reads and writes to its rate; the dirty bytes left (the tier cleaner's lag) are kept
    for the metrics: none after a pass, the new segments' when a pass is not worth it."""
    rate = 16_000
    local = LogCleaner(CleanerConfig(enable=False, io_max_bytes_per_second=rate), [], list)
    recorder = PassRecorder()
    cleaner = TierCleaner(local.new_cleaner(), tiered.ranges, tiered.scratch, observer=recorder)
    tiered.rlm.cleaner = cleaner
    assert cleaner.dirty_bytes(TP) is None  # never measured

    started = time.monotonic()
    tiered.rlm.run_once()
    elapsed_s = time.monotonic() - started
    ((read, written),) = recorder.passes
    assert read + written > 2 * rate
    assert elapsed_s >= (read + written - rate) / rate
    assert cleaner.dirty_bytes(TP) == 0

    lazy = dataclasses.replace(COMPACTED, min_cleanable_dirty_ratio=0.99)
    tiered.log.update_config(lazy)
    produce_updates(tiered.log, tiered.clock, 24, start=BATCHES)
    tiered.tier_everything()  # uploaded, measured, not worth a pass
    assert len(recorder.passes) == 1
    manifest = load_manifest(store, TP)
    dirty = load_view(store, TP).segments_from(manifest.cleaner_offset)
    assert cleaner.dirty_bytes(TP) == sum(segment.log_size_bytes for segment in dirty) > 0
