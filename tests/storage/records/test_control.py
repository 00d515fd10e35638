"""Control records and end-transaction marker batches."""

from __future__ import annotations

import pytest

from tierlog.storage.errors import InvalidRecordError
from tierlog.storage.records import (
    ControlRecordType,
    EndTransactionMarker,
    Record,
    build_batch,
    build_end_txn_marker_batch,
    crc_is_valid,
    decode_records,
    parse_control_type,
    parse_end_txn_marker,
    parse_header,
    read_end_txn_marker,
)
from tierlog.storage.records.control import control_record_key


def test_control_types_have_kafkas_ids() -> None:
    assert (ControlRecordType.ABORT, ControlRecordType.COMMIT) == (0, 1)
    assert control_record_key(ControlRecordType.COMMIT).hex() == "0000" + "0001"
    assert control_record_key(ControlRecordType.ABORT).hex() == "0000" + "0000"


@pytest.mark.parametrize("control_type", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_marker_batch_layout(control_type: ControlRecordType) -> None:
    marker = EndTransactionMarker(control_type, coordinator_epoch=17)
    batch = build_end_txn_marker_batch(
        marker, producer_id=4, producer_epoch=2, timestamp_ms=123, base_offset=50
    )
    header = parse_header(batch)
    assert header.is_control and header.is_transactional and crc_is_valid(batch, header)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4, 2, -1)
    assert (header.base_offset, header.record_count, header.max_timestamp) == (50, 1, 123)
    (record,) = decode_records(batch, header)
    assert record.key == bytes.fromhex("0000") + bytes([0, control_type])
    assert record.value == bytes.fromhex("0000" + "00000011")  # version 0, epoch 17
    assert read_end_txn_marker(batch, header) == marker


def test_newer_versions_are_read_by_their_known_fields() -> None:
    record = Record(0, 0, bytes.fromhex("00010001"), bytes.fromhex("0001000000050000"))
    assert parse_end_txn_marker(record) == EndTransactionMarker(ControlRecordType.COMMIT, 5)


def test_unknown_control_types_come_back_as_their_id() -> None:
    assert parse_control_type(bytes.fromhex("00000002")) is ControlRecordType.LEADER_CHANGE
    assert parse_control_type(bytes.fromhex("00000063")) == 99


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, "000000000001"),
        ("0000", "000000000001"),  # key too short
        ("ffff0001", "000000000001"),  # negative key version
        ("00000002", "000000000001"),  # not a marker type
        ("00000001", "0000"),  # value too short
        ("00000001", None),
        ("00000001", "ffff00000001"),  # negative value version
    ],
)
def test_malformed_markers_are_invalid(key: str | None, value: str | None) -> None:
    record = Record(
        0,
        0,
        None if key is None else bytes.fromhex(key),
        None if value is None else bytes.fromhex(value),
    )
    with pytest.raises(InvalidRecordError):
        parse_end_txn_marker(record)


def test_reading_a_marker_from_a_data_batch_is_invalid() -> None:
    from tierlog.storage.records import SimpleRecord

    batch = build_batch([SimpleRecord(b"k", b"v", 1)])
    with pytest.raises(InvalidRecordError):
        read_end_txn_marker(batch, parse_header(batch))


def test_markers_need_a_producer_and_a_marker_type() -> None:
    with pytest.raises(ValueError):
        EndTransactionMarker(ControlRecordType.LEADER_CHANGE, 0)
    with pytest.raises(ValueError):
        build_end_txn_marker_batch(
            EndTransactionMarker(ControlRecordType.COMMIT, 0),
            producer_id=-1,
            producer_epoch=0,
            timestamp_ms=0,
        )
