"""The ``.txnindex`` file: Kafka's 34-byte entries, created by the first append, never
preallocated; truncation, torn tails, sanity checks, and the search that stops early."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.transaction_index import (
    ENTRY_BYTES,
    AbortedTxn,
    TransactionIndex,
    collect_aborted,
    decode_entries,
    encode_entries,
    search_entries,
)


def index_at(tmp_path: Path, base_offset: int = 100) -> TransactionIndex:
    return TransactionIndex(tmp_path / f"{base_offset:020d}.txnindex", base_offset)


def test_an_entry_is_kafkas_34_big_endian_bytes() -> None:
    entry = AbortedTxn(producer_id=7, first_offset=3, last_offset=9, last_stable_offset=10)
    assert ENTRY_BYTES == 34
    assert entry.encode().hex() == (
        "0000"  # version 0
        + f"{7:016x}"
        + f"{3:016x}"
        + f"{9:016x}"
        + f"{10:016x}"
    )
    assert decode_entries(entry.encode()) == [entry]


def test_the_file_appears_with_the_first_entry_and_grows_by_one_entry(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    assert index.entries() == [] and not index.path.exists()
    index.truncate_to(0)
    index.reset()
    index.flush()
    assert not index.path.exists(), "nothing creates the file but an append"
    first = AbortedTxn(1, 90, 105, 106)
    second = AbortedTxn(2, 101, 110, 95)
    index.append(first)
    assert index.path.stat().st_size == ENTRY_BYTES
    index.append(second)
    assert index.path.read_bytes() == encode_entries([first, second])
    assert TransactionIndex(index.path, 100).entries() == [first, second]


def test_markers_must_come_in_offset_order(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    index.append(AbortedTxn(1, 100, 105, 106))
    reopened = TransactionIndex(index.path, 100)
    with pytest.raises(ValueError, match="does not follow"):
        reopened.append(AbortedTxn(2, 100, 105, 106))
    assert reopened.entries() == [AbortedTxn(1, 100, 105, 106)]


def test_truncation_drops_the_entries_whose_marker_is_at_or_after_the_offset(
    tmp_path: Path,
) -> None:
    index = index_at(tmp_path)
    entries = [
        AbortedTxn(1, 100, 102, 103),
        AbortedTxn(2, 101, 105, 106),
        AbortedTxn(1, 106, 108, 109),
    ]
    for entry in entries:
        index.append(entry)
    index.truncate_to(106)
    assert index.entries() == entries[:2]
    index.truncate_to(105)
    assert index.entries() == entries[:1]
    index.append(AbortedTxn(3, 104, 107, 108))  # appends continue after the cut
    assert index.entries() == [entries[0], AbortedTxn(3, 104, 107, 108)]
    index.reset()
    assert index.path.exists() and index.path.stat().st_size == 0


def test_a_torn_tail_is_ignored_and_overwritten(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    whole = AbortedTxn(1, 100, 102, 103)
    index.path.write_bytes(whole.encode() + b"\x00\x00\x00\x00\x00")
    assert index.entries() == [whole]
    with pytest.raises(CorruptRecordError, match="whole number"):
        index.sanity_check()
    index.append(AbortedTxn(2, 101, 104, 105))
    assert index.path.stat().st_size == 2 * ENTRY_BYTES
    index.sanity_check()


def test_an_unknown_version_or_an_entry_below_the_base_offset_is_corrupt(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    index.path.write_bytes(b"\x00\x01" + AbortedTxn(1, 100, 102, 103).encode()[2:])
    with pytest.raises(CorruptRecordError, match="version 1"):
        index.entries()
    index.path.write_bytes(AbortedTxn(1, 90, 99, 100).encode())
    with pytest.raises(CorruptRecordError, match="below the segment's base offset"):
        index.sanity_check()


def test_rename_and_delete_follow_the_file(tmp_path: Path) -> None:
    index = index_at(tmp_path)
    index.rename_to(tmp_path / "absent.txnindex.deleted")  # nothing to move yet
    index.append(AbortedTxn(1, 100, 102, 103))
    index.rename_to(tmp_path / "moved.txnindex")
    assert index.entries() == [AbortedTxn(1, 100, 102, 103)]
    index.delete()
    assert list(tmp_path.iterdir()) == []


def test_a_search_stops_at_an_entry_whose_last_stable_offset_reaches_the_bound() -> None:
    # Producer 2's transaction from offset 2 stays open while 1 and 3 abort theirs.
    first = [AbortedTxn(1, 0, 4, 2), AbortedTxn(3, 6, 8, 2)]
    second = [AbortedTxn(2, 2, 12, 13)]
    never_read = [AbortedTxn(9, 0, 40, 41)]
    assert search_entries(first, 0, 3) == ([first[0]], False)
    assert search_entries(first + second, 5, 9) == ([first[1], second[0]], True)
    assert collect_aborted([first, second, never_read], 0, 3) == [first[0], second[0]]
    assert collect_aborted([first, second, never_read], 9, 10) == [second[0]]


@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 50), st.integers(0, 10), st.integers(0, 60)),
        max_size=12,
    ),
    st.integers(0, 70),
    st.integers(0, 70),
)
def test_a_search_returns_exactly_the_overlapping_entries_up_to_where_it_stops(
    raw: list[tuple[int, int, int, int]], start: int, upper: int
) -> None:
    entries = [AbortedTxn(pid, first, first + length, lso) for pid, first, length, lso in raw]
    found, complete = search_entries(entries, start, upper)
    stop = next(
        (slot + 1 for slot, entry in enumerate(entries) if entry.last_stable_offset >= upper),
        len(entries),
    )
    assert complete == any(entry.last_stable_offset >= upper for entry in entries)
    assert found == [e for e in entries[:stop] if e.last_offset >= start and e.first_offset < upper]
