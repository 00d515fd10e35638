"""The sparse ``.index`` and ``.timeindex``: entries, floor lookups, growth and trimming."""

from __future__ import annotations

import bisect
import mmap
import random
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.index import (
    IndexEntry,
    OffsetIndex,
    TimeIndex,
    offset_index_lookup,
    time_index_lookup,
)

BASE = 1000


def offset_index(path: Path, max_index_bytes: int = 800, *, writable: bool = True) -> OffsetIndex:
    return OffsetIndex(
        path / "00000000000000001000.index", BASE, max_index_bytes, writable=writable
    )


def time_index(path: Path, max_index_bytes: int = 1200, *, writable: bool = True) -> TimeIndex:
    return TimeIndex(
        path / "00000000000000001000.timeindex", BASE, max_index_bytes, writable=writable
    )


# -- offset index -----------------------------------------------------------------------


def test_entries_are_eight_bytes_of_relative_offset_and_position(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(1005, 0)
    index.append(1010, 4096)
    index.close()
    assert (tmp_path / "00000000000000001000.index").read_bytes() == struct.pack(
        ">iiii", 5, 0, 10, 4096
    )


def test_lookup_returns_the_largest_entry_at_or_below_the_offset(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    for offset, position in [(1003, 100), (1007, 200), (1020, 300)]:
        index.append(offset, position)
    assert index.lookup(1003) == IndexEntry(1003, 100)
    assert index.lookup(1006) == IndexEntry(1003, 100)
    assert index.lookup(1007) == IndexEntry(1007, 200)
    assert index.lookup(1019) == IndexEntry(1007, 200)
    assert index.lookup(5000) == IndexEntry(1020, 300)
    index.close()


def test_lookup_below_every_entry_or_in_an_empty_index_is_the_segment_start(
    tmp_path: Path,
) -> None:
    index = offset_index(tmp_path)
    assert index.lookup(1500) == IndexEntry(BASE, 0)
    index.append(1010, 50)
    assert index.lookup(1009) == IndexEntry(BASE, 0)
    assert index.lookup(0) == IndexEntry(BASE, 0)
    index.close()


def test_offsets_must_strictly_increase(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(1010, 50)
    with pytest.raises(CorruptRecordError):
        index.append(1010, 60)
    with pytest.raises(CorruptRecordError):
        index.append(1005, 60)
    assert index.entries == 1
    index.close()


def test_a_writable_index_is_preallocated_to_whole_entries_and_trimmed_on_close(
    tmp_path: Path,
) -> None:
    path = tmp_path / "00000000000000001000.index"
    index = offset_index(tmp_path, max_index_bytes=100)  # 12 whole entries of 8 bytes
    assert path.stat().st_size == 96
    assert index.max_entries == 12
    index.append(1001, 10)
    index.append(1002, 20)
    assert path.stat().st_size == 96
    index.close()
    assert path.stat().st_size == 16


def _allocated_bytes(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_the_preallocation_is_sparse_and_blocks_come_a_page_at_a_time(tmp_path: Path) -> None:
    """A new partition's indexes cost no disk until entries are stored (as Kafka's), and
    then only the pages those entries are in."""
    for index in (offset_index(tmp_path, 10 * 1024 * 1024), time_index(tmp_path, 10 * 1024 * 1024)):
        assert index.path.stat().st_size == index.max_entries * index.entry_size
        assert _allocated_bytes(index.path) == 0
        for slot in range(2 * mmap.PAGESIZE // index.entry_size):  # two pages of entries
            if isinstance(index, OffsetIndex):
                index.append(BASE + 1 + slot, slot)
            else:
                index.maybe_append(1_700_000_000_000 + slot, BASE + slot)
        assert 0 < _allocated_bytes(index.path) <= 2 * mmap.PAGESIZE
        index.close()


def test_a_reopened_index_keeps_its_entries(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(1001, 10)
    index.append(1009, 90)
    index.close()
    again = offset_index(tmp_path, writable=False)
    assert again.entries == 2
    assert again.lookup(1010) == IndexEntry(1009, 90)
    again.close()
    writable = offset_index(tmp_path, max_index_bytes=800)
    assert writable.entries == 2
    assert writable.path.stat().st_size == 800
    writable.append(1010, 100)
    writable.close()
    assert writable.path.stat().st_size == 24


def test_a_full_index_refuses_more_entries(tmp_path: Path) -> None:
    index = offset_index(tmp_path, max_index_bytes=16)
    index.append(1001, 1)
    assert not index.is_full
    index.append(1002, 2)
    assert index.entries == index.max_entries == 2  # full
    with pytest.raises(CorruptRecordError):
        index.append(1003, 3)
    index.close()


def test_truncate_to_drops_entries_at_and_above_the_offset(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    for i in range(1, 6):
        index.append(BASE + 10 * i, 100 * i)  # 1010 .. 1050
    index.truncate_to(1030)
    assert [index.entry(slot).key for slot in range(index.entries)] == [1010, 1020]
    index.truncate_to(1025)
    assert index.entries == 2
    index.truncate_to(1011)
    assert index.entries == 1
    index.truncate_to(BASE)
    assert index.entries == 0
    assert index.lookup(1050) == IndexEntry(BASE, 0)
    index.append(1005, 7)  # appends continue after a truncation
    assert index.lookup(1050) == IndexEntry(1005, 7)
    index.close()


def test_sanity_check_accepts_a_valid_index(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(1001, 0)
    index.append(1005, 500)
    index.trim_to_valid_size()
    index.sanity_check(log_size_bytes=1000, log_end_offset=1006)
    index.close()


def test_sanity_check_rejects_an_entry_at_or_past_the_log_end(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(1005, 500)
    with pytest.raises(CorruptRecordError, match="not below the log end offset"):
        index.sanity_check(log_size_bytes=1000, log_end_offset=1005)
    index.close()


@pytest.mark.parametrize(
    "entries",
    [
        [(5, 100), (3, 200)],  # offsets go backwards
        [(1, 100), (2, 100)],  # positions do not increase
        [(-4, 0)],  # an offset below the segment's base
        [(1, 0), (2, 5000)],  # a position past the end of the log
    ],
)
def test_sanity_check_rejects_garbage(tmp_path: Path, entries: list[tuple[int, int]]) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(b"".join(struct.pack(">ii", *entry) for entry in entries))
    index = offset_index(tmp_path, writable=False)
    with pytest.raises(CorruptRecordError):
        index.sanity_check(log_size_bytes=1000, log_end_offset=2000)
    index.close()


def test_sanity_check_rejects_a_length_that_is_not_whole_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(struct.pack(">ii", 1, 0) + b"\x00\x01\x02")
    index = offset_index(tmp_path, writable=False)
    with pytest.raises(CorruptRecordError):
        index.sanity_check(log_size_bytes=1000, log_end_offset=2000)
    index.close()


# -- the warm-section search agrees with a plain binary search --------------------------


def _keys(rng: random.Random, count: int, start: int) -> list[int]:
    keys, key = [], start
    for _ in range(count):
        key += rng.randint(1, 50)
        keys.append(key)
    return keys


@settings(max_examples=30, deadline=None)
@given(
    count=st.integers(1, 2600),  # beyond the 1024 entries of the offset index's warm section
    seed=st.integers(0, 2**32),
    targets=st.lists(st.integers(-10, 150_000), min_size=1, max_size=40),
)
def test_offset_lookup_agrees_with_bisect(count: int, seed: int, targets: list[int]) -> None:
    rng = random.Random(seed)
    keys = _keys(rng, count, BASE)
    with tempfile.TemporaryDirectory() as scratch:
        index = offset_index(Path(scratch), max_index_bytes=count * 8)
        for position, key in enumerate(keys):
            index.append(key, position * 3)
        index.trim_to_valid_size()
        trimmed = index.path.read_bytes()  # what the tier holds: the remote lookup's input
        probes = targets + [rng.choice(keys) for _ in range(10)] + [keys[0] - 1, keys[-1] + 1]
        for target in [BASE + t for t in probes]:
            slot = bisect.bisect_right(keys, target) - 1
            expected = IndexEntry(BASE, 0) if slot < 0 else IndexEntry(keys[slot], slot * 3)
            assert index.lookup(target) == expected
            assert offset_index_lookup(trimmed, BASE, target) == expected
        index.close()


@settings(max_examples=20, deadline=None)
@given(
    count=st.integers(1, 1800),  # beyond the 682 entries of the time index's warm section
    seed=st.integers(0, 2**32),
    targets=st.lists(st.integers(0, 100_000), min_size=1, max_size=40),
)
def test_time_lookup_agrees_with_bisect(count: int, seed: int, targets: list[int]) -> None:
    rng = random.Random(seed)
    timestamps = _keys(rng, count, 0)
    with tempfile.TemporaryDirectory() as scratch:
        index = time_index(Path(scratch), max_index_bytes=count * 12)
        for i, timestamp in enumerate(timestamps):
            index.maybe_append(timestamp, BASE + i)
        index.trim_to_valid_size()
        trimmed = index.path.read_bytes()
        for target in targets + [rng.choice(timestamps) for _ in range(10)]:
            slot = bisect.bisect_right(timestamps, target) - 1
            expected = (
                IndexEntry(-1, BASE) if slot < 0 else IndexEntry(timestamps[slot], BASE + slot)
            )
            assert index.lookup(target) == expected
            assert time_index_lookup(trimmed, BASE, target) == expected
        index.close()


# -- time index -------------------------------------------------------------------------


def test_time_entries_are_twelve_bytes_of_timestamp_and_relative_offset(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    index.maybe_append(1_700_000_000_000, 1004)
    index.close()
    assert (tmp_path / "00000000000000001000.timeindex").read_bytes() == struct.pack(
        ">qi", 1_700_000_000_000, 4
    )


def test_time_index_ignores_timestamps_that_do_not_grow(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    index.maybe_append(100, 1001)
    index.maybe_append(100, 1002)  # equal: ignored
    index.maybe_append(50, 1003)  # older: ignored
    index.maybe_append(101, 1004)
    assert [index.entry(slot) for slot in range(index.entries)] == [
        IndexEntry(100, 1001),
        IndexEntry(101, 1004),
    ]
    index.close()


def test_time_lookup_floor_and_the_empty_answer(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    assert index.lookup(10) == IndexEntry(-1, BASE)
    index.maybe_append(100, 1001)
    index.maybe_append(200, 1005)
    assert index.lookup(99) == IndexEntry(-1, BASE)
    assert index.lookup(100) == IndexEntry(100, 1001)
    assert index.lookup(199) == IndexEntry(100, 1001)
    assert index.lookup(10_000) == IndexEntry(200, 1005)
    index.close()


def test_time_index_preallocates_whole_entries_and_trims_on_close(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.timeindex"
    index = time_index(tmp_path, max_index_bytes=100)  # 8 entries of 12 bytes
    assert path.stat().st_size == 96
    index.maybe_append(5, 1001)
    index.close()
    assert path.stat().st_size == 12


def test_time_index_truncate_to_drops_entries_pointing_at_or_past_the_offset(
    tmp_path: Path,
) -> None:
    index = time_index(tmp_path)
    for i in range(1, 5):
        index.maybe_append(100 * i, BASE + 10 * i)  # offsets 1010 .. 1040
    index.truncate_to(1030)
    assert [index.entry(slot).value for slot in range(index.entries)] == [1010, 1020]
    index.truncate_to(1015)
    assert index.entries == 1
    index.truncate_to(BASE)
    assert index.entries == 0
    index.close()


def test_a_full_time_index_refuses_appends_but_takes_the_closing_entry(tmp_path: Path) -> None:
    index = time_index(tmp_path, max_index_bytes=24)
    index.maybe_append(1, 1001)
    index.maybe_append(2, 1002)
    assert index.is_full
    with pytest.raises(CorruptRecordError):
        index.maybe_append(3, 1003)
    index.maybe_append(3, 1003, skip_full_check=True)
    assert index.last_entry() == IndexEntry(3, 1003)
    index.close()
    assert index.path.stat().st_size == 36


@pytest.mark.parametrize(
    "entries",
    [
        [(200, 1), (100, 2)],  # timestamps go backwards
        [(100, 1), (100, 2)],  # timestamps repeat
        [(100, 5), (200, 3)],  # offsets go backwards
        [(100, -1)],  # offset below the base
    ],
)
def test_time_sanity_check_rejects_garbage(tmp_path: Path, entries: list[tuple[int, int]]) -> None:
    path = tmp_path / "00000000000000001000.timeindex"
    path.write_bytes(b"".join(struct.pack(">qi", *entry) for entry in entries))
    index = time_index(tmp_path, writable=False)
    with pytest.raises(CorruptRecordError):
        index.sanity_check(log_size_bytes=1000)
    index.close()


def test_a_read_only_index_is_never_changed_not_even_trimmed(tmp_path: Path) -> None:
    writer = offset_index(tmp_path)
    writer.append(1001, 10)
    writer.flush()  # left preallocated, as a crashed broker leaves its active index
    path = writer.path
    preallocated = path.read_bytes()
    OffsetIndex(path, BASE, 800, writable=False, read_only=True).close()
    assert path.read_bytes() == preallocated
    writer.close()
    trimmed = path.read_bytes()
    reader = OffsetIndex(path, BASE, 800, writable=False, read_only=True)
    assert reader.lookup(1001) == IndexEntry(1001, 10)
    reader.close()
    assert path.read_bytes() == trimmed == preallocated[:8]
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "00000000000000000007.index", 7, 800, writable=False, read_only=True)


def test_a_read_only_index_outlives_its_writer_trimming_the_file(tmp_path: Path) -> None:
    """A reader in another process (a Spark job tailing a broker's active segment) opens
    the preallocated index; the broker rolls and trims it. Reading the pages past the new
    end of a mapped file would kill the reader with SIGBUS; a read-only index holds what it
    read when it opened."""
    writer = offset_index(tmp_path, max_index_bytes=1 << 20)
    for offset in range(BASE + 1, BASE + 4):
        writer.append(offset, offset * 10)
    writer.flush()
    reader = OffsetIndex(writer.path, BASE, 0, writable=False, read_only=True)
    writer.close()
    assert writer.path.stat().st_size == 3 * 8
    offsets, positions = reader.columns()
    assert reader.entries == (1 << 20) // 8
    assert list(offsets[:4]) == [1001, 1002, 1003, BASE]  # then the zero-filled tail
    assert list(positions[:3]) == [10010, 10020, 10030]
    assert reader.entry(reader.entries - 1) == IndexEntry(BASE, 0)
    reader.close()
