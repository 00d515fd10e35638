"""One compaction round (Kafka's Cleaner): what survives, how it is written, how it is swapped."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from pathlib import Path

import pytest

from tests.storage.compaction import (
    DAY_MS,
    batches_of,
    clean,
    clean_fully,
    compacted,
    keyed_batch,
    latest_values,
    live_values,
    open_compacted,
    records,
)
from tests.storage.conftest import T0, FakeClock, segment_files
from tierlog.storage.cleaner import (
    Cleaner,
    LogCleaningAbortedError,
    filter_batch,
    group_segments_by_size,
    records_section,
    scan_records,
)
from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.file_records import FileBatch
from tierlog.storage.log import Log
from tierlog.storage.records import (
    BatchHeader,
    CompressionType,
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
    crc_is_valid,
    decode_records,
    parse_header,
    patch_offsets,
)
from tierlog.storage.segment import AppendedBatch, LogSegment


def fill(log: Log, rounds: int, keys: int, *, per_batch: int = 4, **batch_options: object) -> None:
    """``rounds`` passes over ``keys`` keys, value ``v<round>-<key>``, rolled at the end."""
    for round_number in range(rounds):
        pairs = [(b"k%d" % key, b"v%d-%d" % (round_number, key)) for key in range(keys)]
        for start in range(0, keys, per_batch):
            log.append(keyed_batch(pairs[start : start + per_batch], **batch_options))  # type: ignore[arg-type]
    log.roll()


def assert_valid_log(log: Log) -> None:
    """Offsets strictly increase, every batch's CRC holds, and reopened from disk it agrees."""
    seen = batches_of(log)
    offsets = [record.offset for _header, batch in seen for record in batch]
    assert offsets == sorted(set(offsets))
    last_offsets = [header.last_offset for header, _batch in seen]
    assert last_offsets == sorted(set(last_offsets))
    for header, batch in seen:
        assert all(header.base_offset <= r.offset <= header.last_offset for r in batch)


def test_each_key_keeps_only_its_latest_value_at_its_own_offset(
    log_dir: Path, clock: FakeClock
) -> None:
    log = open_compacted(log_dir, clock)
    fill(log, rounds=5, keys=10)
    before = records(log)
    end = log.log_end_offset
    result = clean(log)
    after = records(log)
    assert result.end_offset == log.active_segment.base_offset == end
    assert live_values(after) == live_values(before)
    assert len(after) == 10
    last_offset_of = {record.key: record.offset for record in before}
    assert {record.key: record.offset for record in after} == last_offset_of
    assert log.log_end_offset == end
    assert_valid_log(log)


def test_batches_keep_their_offsets_codec_and_producer_fields(
    log_dir: Path, clock: FakeClock
) -> None:
    log = open_compacted(log_dir, clock)
    log.append(
        keyed_batch(
            [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")],
            compression=CompressionType.ZSTD,
            producer_id=7,
            base_sequence=0,
        )
    )
    log.append(keyed_batch([(b"b", b"2")], producer_id=8, base_sequence=0))
    log.roll()
    clean(log)
    (first, survivors), (second, _) = batches_of(log)
    assert [(r.offset, r.key) for r in survivors] == [(0, b"a"), (2, b"c")]
    assert (first.base_offset, first.last_offset) == (0, 2)  # the last offset stays
    assert first.compression is CompressionType.ZSTD
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (7, 0, 0)
    assert (second.base_offset, second.producer_id) == (3, 8)


def test_the_last_batch_of_each_producer_stays_as_an_empty_batch(
    log_dir: Path, clock: FakeClock
) -> None:
    log = open_compacted(log_dir, clock)
    log.append(keyed_batch([(b"a", b"1")], producer_id=1, base_sequence=0))
    log.append(keyed_batch([(b"a", b"2")], producer_id=1, base_sequence=1))
    log.append(keyed_batch([(b"a", b"3")], producer_id=2, base_sequence=0))
    log.append(keyed_batch([(b"z", b"last")]))
    log.roll()
    clean(log)
    seen = [(h.base_offset, h.producer_id, h.base_sequence, len(b)) for h, b in batches_of(log)]
    # Producer 1's first batch goes; its last one stays, empty, with its sequence.
    assert seen == [(1, 1, 1, 0), (2, 2, 0, 1), (3, -1, -1, 1)]
    assert all(crc_is_valid(*_whole(log, h.base_offset)) for h, _ in batches_of(log))


def _whole(log: Log, offset: int) -> tuple[bytes, BatchHeader]:
    buf = log.read(offset, 1).records
    return buf, parse_header(buf, 0)


def test_the_last_batch_of_every_rewritten_segment_stays_so_segments_keep_their_ends(
    log_dir: Path, clock: FakeClock
) -> None:
    log = open_compacted(log_dir, clock, segment_bytes=100)  # one batch a segment
    for value in (b"1", b"2", b"3"):
        log.append(keyed_batch([(b"a", value)]))
    log.append(keyed_batch([(b"b", b"1")]))
    ends_before = [s.next_offset for s in log.segments[:-1]]
    assert ends_before == [1, 2, 3]
    clean(log)
    assert [s.next_offset for s in log.segments[:-1]] == ends_before
    seen = [(h.base_offset, len(b)) for h, b in batches_of(log)]
    assert seen == [(0, 0), (1, 0), (2, 1), (3, 1)]


def test_a_tombstone_lives_for_delete_retention_ms_after_its_first_cleaning(
    log_dir: Path, clock: FakeClock
) -> None:
    log = open_compacted(log_dir, clock, delete_retention_ms=1000)
    log.append(keyed_batch([(b"a", b"1"), (b"b", b"1")]))
    log.append(keyed_batch([(b"a", None)]))
    log.roll()
    clean(log)
    header, kept = batches_of(log)[-1]
    assert [(r.key, r.value) for r in kept] == [(b"a", None)]
    assert header.delete_horizon_ms == T0 + 1000  # KIP-534: bit 6, base timestamp
    assert kept[0].timestamp == T0
    clock.advance(999)
    clean(log)
    assert latest_values(records(log)) == {b"a": None, b"b": b"1"}
    clock.advance(1)
    clean(log)
    assert latest_values(records(log)) == {b"b": b"1"}
    assert batches_of(log)[-1][0].record_count == 0  # the last batch stays, empty
    assert_valid_log(log)


def test_transactional_and_control_batches_are_kept_as_they_are(
    log_dir: Path, clock: FakeClock
) -> None:
    log = open_compacted(log_dir, clock)
    txn = build_batch(
        [SimpleRecord(b"a", b"txn", T0)],
        producer_id=5,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    log.append(txn)
    marker = build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.ABORT, 0),
        producer_id=5,
        producer_epoch=0,
        timestamp_ms=T0,
    )
    append_as_coordinator(log, marker)
    log.append(keyed_batch([(b"a", b"plain")]))
    log.append(keyed_batch([(b"a", None)]))
    log.roll()
    before = log.read(0, 1 << 20).records
    clean(log, budget_bytes=1 << 20)
    after = batches_of(log)
    assert [h.is_transactional for h, _ in after[:2]] == [True, True]
    assert [h.is_control for h, _ in after[:2]] == [False, True]
    assert log.read(0, 1 << 20).records.startswith(before[: after[0][0].size + after[1][0].size])
    # The tombstone may not go while the transactional value it hides is still there.
    clock.advance(2 * DAY_MS)
    clean(log)
    assert latest_values(records(log))[b"a"] is None


def append_as_coordinator(log: Log, batch: bytes) -> None:
    """A control batch, as the transaction coordinator's marker reaches the leader."""
    base = log.log_end_offset
    header = parse_header(batch, 0)
    patched = bytearray(batch)
    patch_offsets(patched, header, base, 0)
    last = base + header.last_offset_delta
    log.active_segment.append(
        [patched], [AppendedBatch(last, header.max_timestamp, len(batch))], len(batch)
    )


def test_a_small_map_cleans_the_range_it_covers_and_the_next_rounds_carry_on(
    log_dir: Path, clock: FakeClock
) -> None:
    log = open_compacted(log_dir, clock, segment_bytes=100_000)
    fill(log, rounds=3, keys=400, per_batch=10)
    before = records(log)
    results = clean_fully(log, budget_bytes=100 * 200)  # about 100 keys a round
    assert len(results) > 3
    assert all(r.stats.map_memory_bytes <= 100 * 200 for r in results)
    assert live_values(records(log)) == live_values(before)
    # A few more rounds from the log start leave one record per key.
    clean_fully(log)
    assert len(records(log)) == 400
    assert_valid_log(log)


def test_groups_respect_segment_bytes_and_segment_index_bytes(
    log_dir: Path, clock: FakeClock
) -> None:
    log = open_compacted(log_dir, clock, segment_bytes=1000, index_interval_bytes=1)
    for number in range(12):
        log.append(keyed_batch([(b"k%d" % number, b"x" * 200)]))
        log.roll()
    closed = log.segments[:-1]
    sizes = [s.size for s in closed]
    groups = group_segments_by_size(closed, 1000, 1 << 20)
    assert [len(g) for g in groups] == [3, 3, 3, 3]
    assert all(sum(s.size for s in g) <= 1000 for g in groups)
    assert sum(sizes) == sum(s.size for g in groups for s in g)
    index_limited = group_segments_by_size(closed, 1 << 30, 16)  # two 8-byte entries
    assert all(sum(s.offset_index.size_bytes for s in g) <= 16 for g in index_limited)
    clean(log)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9, 12]


def test_a_reader_during_cleaning_always_sees_a_consistent_log(
    log_dir: Path, clock: FakeClock
) -> None:
    log = open_compacted(log_dir, clock, segment_bytes=2000, file_delete_delay_ms=60_000)
    fill(log, rounds=6, keys=40)
    expected = live_values(records(log))
    stop = threading.Event()
    problems: list[str] = []
    reads = 0

    def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            seen = records(log)
            offsets = [r.offset for r in seen]
            if offsets != sorted(set(offsets)) or live_values(seen) != expected:
                problems.append(f"inconsistent read: {offsets}")
            reads += 1

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(5):
            clean(log)
    finally:
        stop.set()
        thread.join()
    assert problems == []
    assert reads > 0


def test_an_aborted_round_leaves_the_log_and_the_directory_as_they_were(
    log_dir: Path, clock: FakeClock
) -> None:
    log = open_compacted(log_dir, clock)
    fill(log, rounds=3, keys=10)
    before, files = records(log), segment_files(log_dir)
    with pytest.raises(LogCleaningAbortedError):
        Cleaner(1 << 20).clean(log, 0, log.active_segment.base_offset, should_abort=lambda: True)
    assert records(log) == before
    assert segment_files(log_dir) == files


def test_a_length_damaged_under_the_cleaner_fails_the_round_and_keeps_every_byte(
    log_dir: Path, clock: FakeClock
) -> None:
    """A flipped length field in a segment being cleaned is CorruptRecordError, not the
    segment's end: a cleaned copy ending there would lose every batch after it."""
    log = open_compacted(log_dir, clock)
    fill(log, rounds=3, keys=10)
    first = log.segments[0]
    data = bytearray(first.log.path.read_bytes())
    second = parse_header(data, 0).size
    data[second + 9] ^= 0xFF  # its length now claims 16 MiB more
    first.log.path.write_bytes(data)
    files = {name: (log_dir / name).read_bytes() for name in segment_files(log_dir)}
    with pytest.raises(CorruptRecordError, match="is damaged"):
        Cleaner(1 << 20).clean(log, 0, log.active_segment.base_offset, should_abort=lambda: False)
    assert {name: (log_dir / name).read_bytes() for name in segment_files(log_dir)} == files


def test_a_log_truncated_under_the_cleaner_is_not_swapped(
    log_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_compacted(log_dir, clock)
    fill(log, rounds=3, keys=10)
    original = Log.replace_segments

    def truncate_first(self: Log, new: list[object], old: list[object]) -> bool:
        self.truncate_to(4)
        return original(self, new, old)  # type: ignore[arg-type]

    monkeypatch.setattr(Log, "replace_segments", truncate_first)
    with pytest.raises(LogCleaningAbortedError, match="changed"):
        clean(log)
    assert not [name for name in segment_files(log_dir) if ".cleaned" in name or ".swap" in name]
    assert [r.offset for r in records(log)] == [0, 1, 2, 3]


def test_cleaned_segments_keep_the_modification_time_of_their_last_original(
    log_dir: Path, clock: FakeClock
) -> None:
    log = open_compacted(log_dir, clock)
    fill(log, rounds=2, keys=10)
    old = log.segments[0].log.path
    os.utime(old, (1_000_000, 1_000_000))
    clean(log)
    assert log.segments[0].log.path.stat().st_mtime == 1_000_000


# -- a crash at every step of the swap ---------------------------------------------------


class Crash(Exception):
    """Stands for the process dying at this point: nothing after it runs."""


def crashing_renames(monkeypatch: pytest.MonkeyPatch, survive: int) -> list[str]:
    """Let ``survive`` renames through, then 'crash' on the next one."""
    done: list[str] = []
    original = Path.replace

    def replace(self: Path, target: str | os.PathLike[str]) -> Path:
        if len(done) >= survive:
            raise Crash(f"crash before renaming {self.name} to {Path(target).name}")
        done.append(f"{self.name} -> {Path(target).name}")
        return original(self, target)

    monkeypatch.setattr(Path, "replace", replace)
    return done


def crash_scenario(directory: Path) -> None:
    """Three segments that compact into two groups (so a crash can fall between swaps)."""
    log = Log.open(directory, compacted(segment_bytes=700, delete_retention_ms=0))
    for round_number in range(4):
        for key in range(6):
            value = None if (round_number, key) == (3, 0) else b"v%d" % round_number
            log.append(keyed_batch([(b"k%d" % key, value)]))
    log.close()


def test_a_crash_at_any_rename_of_the_swap_is_completed_or_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pristine = tmp_path / "pristine" / "t-0"
    crash_scenario(pristine)
    before = {r.offset: r for r in records(Log.open(pristine, compacted()))}
    reference = tmp_path / "reference" / "t-0"
    shutil.copytree(pristine, reference)
    cleaned_log = Log.open(reference, compacted(segment_bytes=700))
    with monkeypatch.context() as patch:
        renames = crashing_renames(patch, 10**6)
        clean(cleaned_log)
    after = records(cleaned_log)
    assert len(renames) == 2 * (3 + 3 + 3)  # two swaps: .swap, .deleted, final names
    for survive in range(len(renames) + 1):
        directory = tmp_path / f"crash-{survive}" / "t-0"
        shutil.copytree(pristine, directory)
        log = Log.open(directory, compacted(segment_bytes=700))
        with monkeypatch.context() as patch:
            crashing_renames(patch, survive)
            with contextlib.suppress(Crash):
                clean(log)
        # The process is gone: reopen what it left, as after a kill -9.
        reopened = Log.open(directory, compacted(segment_bytes=700), clean_shutdown=False)
        leftovers = [n for n in segment_files(directory) if n.endswith((".cleaned", ".swap"))]
        assert not leftovers and not [n for n in segment_files(directory) if ".deleted" in n]
        seen = records(reopened)
        offsets = [r.offset for r in seen]
        assert offsets == sorted(set(offsets)), survive
        assert {r.offset for r in after} <= set(offsets) <= set(before), survive
        assert all(before[r.offset] == r or r.value is None for r in seen), survive
        assert live_values(seen) == live_values(before.values()), survive
        assert reopened.log_end_offset == cleaned_log.log_end_offset
        clean(reopened)  # and the next round ends where a round without a crash did
        assert [(r.offset, r.key, r.value) for r in records(reopened)] == [
            (r.offset, r.key, r.value) for r in after
        ], survive


def test_a_crash_while_the_cleaned_segment_is_written_leaves_only_garbage_to_remove(
    log_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_compacted(log_dir, clock)
    fill(log, rounds=3, keys=10)
    before = records(log)
    log.flush()

    def crash(_source: Path, _target: Path) -> None:
        raise Crash("crash with the .cleaned segment written and flushed")

    monkeypatch.setattr("tierlog.storage.cleaner._copy_mtime", crash)
    monkeypatch.setattr(LogSegment, "delete", lambda _self: None)  # no clean-up: a crash
    with pytest.raises(Crash):
        clean(log)
    monkeypatch.undo()
    assert [n for n in segment_files(log_dir) if n.endswith(".cleaned")]
    reopened = Log.open(log_dir, compacted(), clean_shutdown=False)
    assert not [n for n in segment_files(log_dir) if n.endswith(".cleaned")]
    assert records(reopened) == before


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.SNAPPY])
def test_the_record_scanner_agrees_with_the_full_decoder(codec: CompressionType) -> None:
    records_in = [
        SimpleRecord(b"k" * 300, b"v" * 70_000, T0 - 100_000, (("h", b"x"), ("e", None))),
        SimpleRecord(b"", None, T0),
        SimpleRecord(b"\x00\xff", b"", T0 + 2**40),
    ]
    batch = build_batch(records_in, compression=codec, base_offset=1000)
    header = parse_header(batch, 0)
    spans = scan_records(FileBatch(0, header, memoryview(batch)), header)
    decoded = decode_records(batch, header)
    assert [(s.offset, s.key, s.is_tombstone) for s in spans] == [
        (r.offset, r.key, r.value is None) for r in decoded
    ]
    assert [header.base_timestamp + s.timestamp_delta for s in spans] == [
        r.timestamp for r in decoded
    ]
    kept, max_timestamp = filter_batch(
        header, records_section(FileBatch(0, header, memoryview(batch)), header), spans[:2]
    )
    rebuilt = parse_header(kept, 0)
    assert crc_is_valid(kept, rebuilt)
    assert (rebuilt.last_offset, rebuilt.compression, max_timestamp) == (1002, codec, T0)
    assert decode_records(kept, rebuilt) == decoded[:2]
