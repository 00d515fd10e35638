"""A ``.log`` file as batches: appends at the end, reads by position, shallow walks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.conftest import make_batch
from tierlog.storage import file_records
from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.file_records import FileRecords
from tierlog.storage.records import HEADER_READ_SIZE, crc_is_valid, decode_records


def append(records: FileRecords, pieces: list[bytes]) -> None:
    records.append(pieces, sum(map(len, pieces)))


def three_batches() -> list[bytes]:
    return [make_batch(1, tag="a"), make_batch(3, tag="b"), make_batch(2, value_size=500, tag="c")]


def test_append_writes_pieces_as_one_unit_at_the_end(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log")
    batches = three_batches()
    records.append([batches[0]], len(batches[0]))
    head, tail = batches[1][:20], memoryview(batches[1])[20:]
    records.append([head, tail, batches[2]], len(batches[1]) + len(batches[2]))
    assert records.size == sum(map(len, batches))
    assert (tmp_path / "0.log").read_bytes() == b"".join(batches)
    records.close()


def test_read_is_bounded_by_the_size(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log")
    records.append([b"0123456789"], 10)
    assert records.read(2, 3) == b"234"
    assert records.read(8, 100) == b"89"
    assert records.read(10, 5) == b""
    records.close()


def test_headers_walk_batch_boundaries(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log")
    batches = three_batches()
    append(records, batches)
    found = list(records.headers())
    assert [batch.position for batch in found] == [
        0,
        len(batches[0]),
        len(batches[0]) + len(batches[1]),
    ]
    assert [batch.header.record_count for batch in found] == [1, 3, 2]
    assert next(records.headers(found[1].position)).header.record_count == 3
    records.close()


def test_a_torn_tail_ends_the_walk(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log")
    batches = three_batches()
    append(records, [batches[0], batches[1][:-5]])
    assert len(list(records.headers())) == 1
    assert len(list(records.batches())) == 1
    assert records.header_at(len(batches[0])) is None
    records.close()


def test_batches_carry_whole_bytes_ready_for_crc_and_decoding(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log")
    batches = three_batches()
    append(records, batches)
    found = list(records.batches())
    assert [bytes(batch.data) for batch in found] == batches
    for batch in found:
        assert crc_is_valid(batch.buffer, batch.header)
    assert [r.key for r in decode_records(found[1].buffer, found[1].header)] == [
        b"b-0",
        b"b-1",
        b"b-2",
    ]
    records.close()


def test_batches_cross_chunk_boundaries_and_batches_larger_than_a_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_records, "SCAN_CHUNK_BYTES", 700)
    records = FileRecords(tmp_path / "0.log")
    batches = [make_batch(1, value_size=n, tag=str(n)) for n in (100, 2000, 300, 300, 300, 50)]
    append(records, batches)
    assert [bytes(batch.data) for batch in records.batches()] == batches
    records.close()


def test_a_header_cut_by_a_chunk_end_is_read_with_the_next_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every place a scan chunk can end inside a header: not a torn batch, which
    recovery would have cut off with every batch after it."""
    records = FileRecords(tmp_path / "0.log")
    batches = [make_batch(1, value_size=200, tag=str(i)) for i in range(3)]
    append(records, batches)
    for cut in range(1, HEADER_READ_SIZE):
        monkeypatch.setattr(file_records, "SCAN_CHUNK_BYTES", len(batches[0]) + cut)
        assert [bytes(batch.data) for batch in records.batches()] == batches, cut
    records.close()


def test_garbage_where_a_batch_should_start_is_corruption(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log")
    batch = make_batch(2)
    append(records, [batch, b"\xff" * 100])
    walk = records.batches()
    assert bytes(next(walk).data) == batch
    with pytest.raises(CorruptRecordError):
        next(walk)
    records.close()


def test_truncate_to_cuts_the_file_and_refuses_to_grow_it(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log")
    batches = three_batches()
    append(records, batches)
    assert records.truncate_to(len(batches[0])) == len(batches[1]) + len(batches[2])
    assert (tmp_path / "0.log").stat().st_size == len(batches[0])
    with pytest.raises(CorruptRecordError):
        records.truncate_to(len(batches[0]) + 1)
    append(records, [batches[2]])
    assert [b.header.record_count for b in records.headers()] == [1, 2]
    records.close()


def test_reopening_finds_the_size_on_disk(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log")
    append(records, three_batches())
    size = records.size
    records.close()
    again = FileRecords(tmp_path / "0.log")
    assert again.size == size
    again.close()
