"""The producer state map and its ``.snapshot`` file format, below the Log."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.storage.test_idempotent_log import idempotent_batch
from tierlog.storage.errors import CorruptSnapshotError
from tierlog.storage.producer_snapshot import (
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    list_snapshot_offsets,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from tierlog.storage.producer_state import (
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    decrement_sequence,
    in_sequence,
)
from tierlog.storage.records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
    crc32c,
    parse_header,
)
from tierlog.storage.segment import AppendedBatch, LogSegment

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
ENTRIES = st.lists(
    st.builds(SnapshotEntry, INT64, INT16, INT32, INT64, INT32, INT64, INT32, INT64),
    unique_by=lambda entry: entry.producer_id,
    max_size=20,
)


def test_the_file_is_kafkas_version_1_layout() -> None:
    entry = SnapshotEntry(
        producer_id=1000,
        producer_epoch=3,
        last_sequence=41,
        last_offset=77,
        offset_delta=1,
        timestamp=1_700_000_000_000,
        coordinator_epoch=-1,
        current_txn_first_offset=-1,
    )
    body = struct.pack(">i", 1) + struct.pack(
        ">qhiqiqiq", 1000, 3, 41, 77, 1, 1_700_000_000_000, -1, -1
    )
    assert encode_snapshot([entry]) == struct.pack(">hI", 1, crc32c(body)) + body
    assert len(encode_snapshot([entry])) == 2 + 4 + 4 + 46
    assert decode_snapshot(encode_snapshot([entry])) == [entry]


@given(ENTRIES)
def test_entries_round_trip_in_producer_id_order(entries: list[SnapshotEntry]) -> None:
    decoded = decode_snapshot(encode_snapshot(entries))
    assert decoded == sorted(entries, key=lambda entry: entry.producer_id)


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-1],  # truncated
        lambda data: data + b"\x00",  # trailing bytes
        lambda data: data[:9],  # not even a count
        lambda data: b"\x00\x02" + data[2:],  # another version
        lambda data: data[:20] + bytes([data[20] ^ 1]) + data[21:],  # a flipped bit
        lambda data: b"",
    ],
)
def test_a_damaged_file_is_a_corrupt_snapshot(damage: object) -> None:
    assert callable(damage)
    data = encode_snapshot([SnapshotEntry(1, 0, 4, 9, 4, 0, -1, -1)])
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(damage(data))


def test_files_are_named_by_offset_and_listed_in_order(tmp_path: Path) -> None:
    for offset in (120, 7, 3_000_000_000):
        write_snapshot(snapshot_path(tmp_path, offset), [], sync=offset == 7)
    (tmp_path / "00000000000000000005.snapshot.tmp").write_bytes(b"torn")
    (tmp_path / "00000000000000000005.log").write_bytes(b"")
    assert snapshot_path(tmp_path, 7).name == "00000000000000000007.snapshot"
    assert list_snapshot_offsets(tmp_path) == [7, 120, 3_000_000_000]
    assert read_snapshot(snapshot_path(tmp_path, 120)) == []


def test_sequences_wrap_at_int32_max() -> None:
    assert in_sequence(2**31 - 1, 0) and in_sequence(4, 5)
    assert not in_sequence(4, 6) and not in_sequence(2**31 - 1, 1)
    assert decrement_sequence(1, 3) == 2**31 - 2
    assert BatchMetadata(last_seq=1, last_offset=10, offset_delta=3, timestamp=0).first_seq == (
        2**31 - 2
    )


def test_an_entry_keeps_the_last_five_batches_and_only_its_last_goes_to_a_snapshot() -> None:
    entry = ProducerStateEntry(5)
    for i in range(7):
        entry.add_batch(2, BatchMetadata(2 * i + 1, 10 + 2 * i, 1, 100 + i))
    assert [batch.first_seq for batch in entry.batches] == [4, 6, 8, 10, 12]
    assert entry.find_duplicate(2, 4, 5) is not None and entry.find_duplicate(2, 2, 3) is None
    assert entry.find_duplicate(1, 4, 5) is None
    restored = ProducerStateEntry.from_snapshot(entry.to_snapshot())
    assert list(restored.batches) == [entry.batches[-1]]
    assert (restored.producer_epoch, restored.last_timestamp) == (2, 106)
    entry.update_epoch(3)
    assert entry.is_empty and entry.to_snapshot().last_offset == -1


def write_segment(directory: Path, batches: list[bytes], base_offset: int = 0) -> LogSegment:
    """A segment holding ``batches`` at consecutive offsets, as a leader would write them."""
    segment = LogSegment(
        directory, base_offset, index_interval_bytes=4096, max_index_bytes=1024, active=True
    )
    offset = base_offset
    for raw in batches:
        batch = bytearray(raw)
        header = parse_header(batch, 0)
        struct.pack_into(">q", batch, 0, offset)
        last = offset + header.last_offset - header.base_offset
        appended = AppendedBatch(last, header.max_timestamp, len(batch))
        segment.append([bytes(batch)], [appended], len(batch))
        offset = last + 1
    return segment


def test_replay_opens_and_closes_transactions_from_the_log(tmp_path: Path) -> None:
    commit = EndTransactionMarker(ControlRecordType.COMMIT, coordinator_epoch=4)
    segment = write_segment(
        tmp_path,
        [
            idempotent_batch(7, 1, 0, 2, transactional=True),  # 0-1
            idempotent_batch(9, 0, 0, 1),  # 2
            idempotent_batch(7, 1, 2, 2, transactional=True),  # 3-4
            build_end_txn_marker_batch(commit, producer_id=7, producer_epoch=1, timestamp_ms=5),
            idempotent_batch(7, 1, 4, 1, transactional=True),  # 6
        ],
    )
    manager = ProducerStateManager(tmp_path)
    manager.load([segment], log_start_offset=0, log_end_offset=6)
    entry = manager.last_entry(7)
    assert entry is not None
    assert (entry.current_txn_first_offset, entry.coordinator_epoch, entry.last_seq) == (None, 4, 3)
    manager.replay([segment], 7)
    assert entry.current_txn_first_offset == 6 and manager.map_end_offset == 7
    manager.take_snapshot(sync=True)
    saved = {e.producer_id: e for e in read_snapshot(snapshot_path(tmp_path, 7))}
    assert saved[7].current_txn_first_offset == 6 and saved[7].coordinator_epoch == 4
    assert (saved[9].last_sequence, saved[9].last_offset) == (0, 2)
    segment.close()


def test_load_takes_the_newest_readable_snapshot_and_replays_after_it(tmp_path: Path) -> None:
    segments = [
        write_segment(tmp_path, [idempotent_batch(7, 0, 0), idempotent_batch(7, 0, 2)]),
        write_segment(tmp_path, [idempotent_batch(7, 0, 4), idempotent_batch(7, 0, 6)], 4),
    ]
    manager = ProducerStateManager(tmp_path)
    manager.load(segments[:1], log_start_offset=0, log_end_offset=4)
    manager.take_snapshot(sync=True)  # at the second segment's base: offsets 0-3
    manager.replay(segments, 8)
    manager.take_snapshot(sync=True)  # at the log end, as a clean close leaves it
    write_snapshot(snapshot_path(tmp_path, 2), [], sync=True)  # a stray: no segment 2
    assert list_snapshot_offsets(tmp_path) == [2, 4, 8]
    snapshot_path(tmp_path, 8).write_bytes(b"\x00\x01garbage")
    reloaded = ProducerStateManager(tmp_path)
    reloaded.load(segments, log_start_offset=0, log_end_offset=8)
    assert list_snapshot_offsets(tmp_path) == [4]
    entry = reloaded.last_entry(7)
    assert entry is not None and [b.first_seq for b in entry.batches] == [2, 4, 6]
    for segment in segments:
        segment.close()
