"""The remote log reader on a local-directory tier: the same bytes a local read gives."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.storage.conftest import T0, batch_with_timestamps, config, headers_of
from tests.storage.tier.faults import FaultyStore
from tests.storage.tier.uploads import tier_closed_segments, tier_segments
from tests.storage.transactions import TxnWriter
from tierlog.storage.errors import CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError
from tierlog.storage.log import MAX_TIMESTAMP, Log
from tierlog.storage.records import V2_HEADER_SIZE, CompressionType, iter_batches
from tierlog.storage.records.batch import LENGTH_OFFSET, MAGIC_OFFSET
from tierlog.storage.tier.chunk_buffers import Filled, nothing_filled
from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.layout import manifest_key, manifest_prefix
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest_store import ManifestWriter, load_view
from tierlog.storage.tier.range_reader import RangeReader
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.tier.store import ObjectInfo, ObjectStoreUnavailableError
from tierlog.storage.topic_partition import TopicPartition

TP = TopicPartition("events", 0)
CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD]


def fill(log: Log, batches: int, *, seed: int = 1) -> None:
    """Batches of 1-20 records with growing (sometimes repeated) timestamps, mixed codecs."""
    rng = random.Random(seed)
    timestamp = T0
    for _ in range(batches):
        count = rng.randint(1, 20)
        stamps = []
        for _ in range(count):
            timestamp += rng.choice([0, 1, 7])
            stamps.append(timestamp)
        log.append(batch_with_timestamps(stamps, rng.choice(CODECS)))


@pytest.fixture
def store(tmp_path: Path) -> LocalDirectoryStore:
    return LocalDirectoryStore(tmp_path / "tier")


def make_reader(tmp_path: Path, store: LocalDirectoryStore, name: str = "cache") -> RemoteLogReader:
    cache = ChunkCache(tmp_path / name, chunk_bytes=1000, max_bytes=1 << 24, max_entries=10_000)
    return RemoteLogReader(RangeReader(store, cache, prefetch_chunks=1, threads=2))


@pytest.fixture
def reader(tmp_path: Path, store: LocalDirectoryStore) -> Iterator[RemoteLogReader]:
    reader = make_reader(tmp_path, store)
    yield reader
    reader.ranges.close()


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    log = Log.open(
        tmp_path / "events-0",
        config(segment_bytes=6000, index_interval_bytes=300, remote_storage_enable=True),
    )
    fill(log, 200)
    log.roll()
    yield log
    log.close()


def test_every_tiered_offset_reads_the_bytes_a_local_read_gives(
    log: Log, store: LocalDirectoryStore, reader: RemoteLogReader
) -> None:
    manifest = tier_closed_segments(store, TP, log)
    assert len(load_view(store, TP).all_segments()) == len(log.segments) - 1 >= 5
    for offset in range(manifest.end_offset):
        for max_bytes in (1, 5000):
            assert reader.read(TP, offset, max_bytes) == log.read(offset, max_bytes).records


def test_reading_the_tier_front_to_back_gives_the_log(
    log: Log, store: LocalDirectoryStore, reader: RemoteLogReader
) -> None:
    end = tier_closed_segments(store, TP, log).end_offset
    local = bytearray()
    remote = bytearray()
    offset = 0
    while offset < end:
        chunk = reader.read(TP, offset, 2500)
        remote += chunk
        local += log.read(offset, 2500).records
        offset = headers_of(chunk)[-1].next_offset
    assert remote == local
    assert reader.read(TP, end, 2500) == b""  # the tier's end: the local log goes on
    assert reader.bytes_read == len(remote)


def test_without_min_one_batch_nothing_larger_than_max_bytes_comes_back(
    log: Log, store: LocalDirectoryStore, reader: RemoteLogReader
) -> None:
    tier_closed_segments(store, TP, log)
    assert reader.read(TP, 0, 1, min_one_batch=False) == b""
    assert reader.read(TP, 0, 1) == log.read(0, 1).records != b""


def test_a_stale_view_of_an_unchanged_manifest_is_reloaded_by_a_listing_alone(
    tmp_path: Path, log: Log, store: LocalDirectoryStore
) -> None:
    tier_closed_segments(store, TP, log)
    reads = FaultyStore(store)  # the reader's requests, counted
    now = [0.0]
    cache = ChunkCache(tmp_path / "c", chunk_bytes=1000, max_bytes=1 << 24, max_entries=10_000)
    reader = RemoteLogReader(RangeReader(reads, cache), view_ttl_s=5, clock_s=lambda: now[0])
    view = reader.view(TP)
    now[0] = 6.0  # stale
    reads.calls.clear()
    assert reader.view(TP) is view
    assert reads.calls == [("list", manifest_prefix(TP))]
    writer = ManifestWriter.claim(store, TP, "retention")
    writer.update(lambda manifest: manifest.advance_log_start(40))
    now[0] = 12.0
    assert reader.view(TP).log_start_offset == 40  # changed: the new head is read
    reader.ranges.close()


def test_offsets_below_the_tiers_log_start_are_out_of_range(
    log: Log, store: LocalDirectoryStore, reader: RemoteLogReader
) -> None:
    tier_closed_segments(store, TP, log)
    writer = ManifestWriter.claim(store, TP, "retention")
    writer.update(lambda manifest: manifest.advance_log_start(40))
    reader.invalidate(TP)
    assert reader.view(TP).log_start_offset == 40
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(TP, 39, 1000)
    assert reader.read(TP, 40, 1000) == log.read(40, 1000).records


def test_a_segment_deleted_after_the_view_was_loaded_is_noticed(
    log: Log, store: LocalDirectoryStore, reader: RemoteLogReader
) -> None:
    tier_closed_segments(store, TP, log)
    first, second = load_view(store, TP).all_segments()[:2]
    assert reader.view(TP).segment_for_offset(0) == first  # cached, with the first segment
    writer = ManifestWriter.claim(store, TP, "retention")
    writer.update(lambda m: m.advance_log_start(second.base_offset))
    store.delete([first.key])
    writer.update(lambda m: m.forget_deleted(second.base_offset))
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(TP, first.base_offset, 1000)
    assert reader.view(TP).all_segments()[0] == second


def test_segments_uploaded_after_the_view_was_loaded_are_found(
    log: Log, store: LocalDirectoryStore, reader: RemoteLogReader
) -> None:
    segments = log.segments[:-1]
    tier_segments(store, TP, segments[:2])
    assert reader.view(TP).end_offset == segments[2].base_offset
    tier_segments(store, TP, segments[2:3])
    offset = segments[2].base_offset + 1
    assert reader.read(TP, offset, 1000) == log.read(offset, 1000).records


def test_offset_for_timestamp_agrees_with_the_local_log(
    log: Log, store: LocalDirectoryStore, reader: RemoteLogReader
) -> None:
    tier_closed_segments(store, TP, log)
    tiered_max = load_view(store, TP).all_segments()[-1].max_timestamp
    for timestamp in range(T0 - 5, tiered_max + 1, 3):
        expected = log.offset_for_timestamp(timestamp)
        assert reader.offset_for_timestamp(TP, timestamp) == expected
    assert reader.offset_for_timestamp(TP, tiered_max + 10**6) is None
    found = reader.offset_for_timestamp(TP, T0, start_offset=100)
    assert found is not None and found.offset == 100


def test_the_largest_timestamp_is_the_records_not_the_batchs(
    tmp_path: Path, store: LocalDirectoryStore, reader: RemoteLogReader
) -> None:
    log = Log.open(tmp_path / "events-0", config(segment_bytes=2000, remote_storage_enable=True))
    fill(log, 30)
    log.append(batch_with_timestamps([T0 + 10**6, T0 + 5, T0 + 10**6]))  # the max, twice
    fill(log, 30, seed=2)
    log.roll()
    tier_closed_segments(store, TP, log)
    expected = log.offset_for_timestamp(MAX_TIMESTAMP)
    assert expected is not None and expected.timestamp == T0 + 10**6
    assert reader.max_timestamp(TP) == expected
    log.close()


def test_a_cold_reader_and_a_warm_one_read_the_same(
    tmp_path: Path, log: Log, store: LocalDirectoryStore, reader: RemoteLogReader
) -> None:
    end = tier_closed_segments(store, TP, log).end_offset
    first_pass = [reader.read(TP, offset, 3000) for offset in range(0, end, 7)]
    gets_before = reader.ranges.cache.stats().misses
    second_pass = [reader.read(TP, offset, 3000) for offset in range(0, end, 7)]
    assert second_pass == first_pass
    assert reader.ranges.cache.stats().misses == gets_before  # all from the cache
    restarted = make_reader(tmp_path, store)  # same cache directory: a restart
    try:
        assert [restarted.read(TP, offset, 3000) for offset in range(0, end, 7)] == first_pass
        assert restarted.ranges.cache.stats().misses == 0
    finally:
        restarted.ranges.close()


class NoIndexStore(LocalDirectoryStore):
    """The real local store whose ranges reaching past ``unreadable_from`` of an object
    fail."""

    unreadable_from: dict[str, int] = {}  # noqa: RUF012 (set per test, one store each)

    def get_into(
        self,
        key: str,
        start: int,
        buffers: Sequence[memoryview],
        on_filled: Filled = nothing_filled,
    ) -> int:
        end = start + sum(len(buffer) for buffer in buffers)
        if end > self.unreadable_from.get(key, end):
            raise ObjectStoreUnavailableError(f"{key} from {start}: the store is away")
        return super().get_into(key, start, buffers, on_filled)


def test_a_read_from_a_segments_base_offset_does_not_wait_for_its_index(
    tmp_path: Path, log: Log
) -> None:
    """A reader crossing into a segment (or a cold scan) starts at its base offset,
    whose batch is the log's first byte: it reads that without the offset index, whose
    GET would be a round trip to the store before its first byte; a read further in
    needs the index."""
    store = NoIndexStore(tmp_path / "tier")
    tier_closed_segments(store, TP, log)
    first = load_view(store, TP).all_segments()[0]
    cache = ChunkCache(
        tmp_path / "cache", chunk_bytes=first.log_size_bytes, max_bytes=1 << 24, max_entries=100
    )  # chunk 0 of the segment's object is its log, the index parts come after
    reader = RemoteLogReader(RangeReader(store, cache, prefetch_chunks=0, threads=2))
    store.unreadable_from = {first.key: first.log_size_bytes}
    try:
        assert reader.read(TP, first.base_offset, 1) == log.read(first.base_offset, 1).records
        with pytest.raises(ObjectStoreUnavailableError):  # inside: the index is needed
            reader.read(TP, first.end_offset - 1, 1)
    finally:
        reader.ranges.close()


class FlakyListStore(LocalDirectoryStore):
    """The real local store whose listings fail while ``away`` (S3 down for a moment)."""

    away = False

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        if self.away:
            raise ObjectStoreUnavailableError("the store is away")
        return super().list(prefix)


def test_a_stale_view_is_served_while_the_store_cannot_reload_it(tmp_path: Path, log: Log) -> None:
    store = FlakyListStore(tmp_path / "tier")
    tier_closed_segments(store, TP, log)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=1000, max_bytes=1 << 24, max_entries=1000)
    reader = RemoteLogReader(RangeReader(store, cache, prefetch_chunks=0), view_ttl_s=0)
    try:
        expected = reader.read(TP, 5, 1000)
        store.away = True
        assert reader.read(TP, 5, 1000) == expected  # stale view, cached chunks
        with pytest.raises(ObjectStoreUnavailableError):
            reader.view(TP, refresh=True)
    finally:
        reader.ranges.close()


def test_aborted_transactions_come_back_from_the_tier_as_the_local_log_has_them(
    tmp_path: Path, store: LocalDirectoryStore, reader: RemoteLogReader
) -> None:
    log = Log.open(tmp_path / "events-0", config(segment_bytes=400, remote_storage_enable=True))
    txns = TxnWriter(log)
    rng = random.Random(3)
    for _ in range(60):
        producer = rng.randint(1, 3)
        if rng.random() < 0.3:
            txns.end(producer, commit=rng.random() < 0.3)
        else:
            txns.send(producer, rng.randint(1, 3))
    log.roll()
    manifest = tier_closed_segments(store, TP, log)
    assert len(load_view(store, TP).all_segments()) >= 5 and len(txns.aborted) >= 5
    end = manifest.end_offset
    for start in range(0, end, 3):
        for upper in (start + 1, start + 7, end):
            tiered = reader.collect_aborted_transactions(TP, start, upper)
            assert tiered == log.collect_aborted_transactions(start, upper)
            assert set(tiered) == txns.overlapping(start, upper)
    log.close()


def test_a_damaged_batch_is_refused_by_reads_and_time_lookups_naming_object_and_offset(
    log: Log, store: LocalDirectoryStore, reader: RemoteLogReader
) -> None:
    tier_closed_segments(store, TP, log)
    segment = load_view(store, TP).all_segments()[2]
    batches = list(iter_batches(log.read(segment.base_offset, 1 << 20).records))
    inside = [h for h in batches if h.last_offset < segment.end_offset]
    victim = inside[len(inside) // 2]
    path = store.root / segment.key
    data = bytearray(path.read_bytes())
    data[victim.position + victim.size - 5] ^= 0x01  # inside its records: only the CRC tells
    path.write_bytes(data)

    with pytest.raises(CorruptRecordError) as refused:
        reader.read(TP, victim.base_offset, 1)
    assert segment.key in str(refused.value)
    assert f"offset {victim.base_offset}" in str(refused.value)
    with pytest.raises(CorruptRecordError):  # decoding it for a time lookup
        reader.offset_for_timestamp(TP, victim.max_timestamp, victim.base_offset)
    before = reader.read(TP, segment.base_offset, 1)  # the batches before it still serve
    assert before == log.read(segment.base_offset, 1).records


@pytest.mark.parametrize(
    "damage_at",
    [V2_HEADER_SIZE + 2, MAGIC_OFFSET, LENGTH_OFFSET + 1, LENGTH_OFFSET + 3],
    ids=["record body", "magic", "length past the segment's end", "length within it"],
)
def test_a_read_that_reaches_a_damaged_batch_returns_the_whole_batches_before_it(
    log: Log, store: LocalDirectoryStore, reader: RemoteLogReader, damage_at: int
) -> None:
    """As a local read does: the batches before the damage are an answer (a consumer
    reads every record up to it), and the read that starts at the damaged batch is
    refused naming the object and the offset."""
    tier_closed_segments(store, TP, log)
    segment = load_view(store, TP).all_segments()[2]
    records = log.read(segment.base_offset, 1 << 20).records
    inside = [h for h in iter_batches(records) if h.last_offset < segment.end_offset]
    victim = inside[len(inside) // 2]
    path = store.root / segment.key
    data = bytearray(path.read_bytes())
    data[victim.position + damage_at] ^= 0xFF
    path.write_bytes(data)

    for start in range(segment.base_offset, victim.base_offset):
        holder = next(h for h in inside if h.last_offset >= start)
        intact = records[holder.position : victim.position]
        assert reader.read(TP, start, segment.log_size_bytes) == intact
    with pytest.raises(CorruptRecordError) as refused:
        reader.read(TP, victim.base_offset, segment.log_size_bytes)
    assert segment.key in str(refused.value)
    assert f"offset {victim.base_offset}" in str(refused.value)


def test_a_garbled_newest_head_serves_the_newest_readable_one_and_skips_nothing(
    log: Log,
    store: LocalDirectoryStore,
    reader: RemoteLogReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 29, item 10: the offsets an older head names are served, logged once at
    ERROR; the offsets only the garbled head names (its last upload) are a storage
    error, never an empty answer that would move a consumer on to the local log."""
    manifest = tier_closed_segments(store, TP, log)
    newest = manifest_key(TP, manifest.version)  # the last segment's upload finished
    intact = (store.root / newest).read_bytes()
    (store.root / newest).write_bytes(intact[: len(intact) // 2])
    last = log.segments[-2]  # the last tiered one: only the garbled head has it finished

    for offset in range(0, last.base_offset, 7):
        assert reader.read(TP, offset, 5000) == log.read(offset, 5000).records
    for offset in (last.base_offset, manifest.end_offset - 1):
        with pytest.raises(KafkaStorageError, match=newest):
            reader.read(TP, offset, 5000)
    with pytest.raises(KafkaStorageError, match=newest):  # only the lost part may hold it
        reader.offset_for_timestamp(TP, last.max_timestamp_so_far)
    garbled = [r for r in caplog.records if newest in r.getMessage()]
    assert [r.levelno for r in garbled] == [logging.ERROR]  # once, however often reloaded

    (store.root / newest).write_bytes(intact)  # restored (or superseded by its writer)
    assert reader.read(TP, last.base_offset, 5000) == log.read(last.base_offset, 5000).records
