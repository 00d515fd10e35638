"""v2 records: the bytes of one record and its round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records.record import (
    MIN_RECORD_SIZE,
    Record,
    decode_record,
    encode_record,
)

NULLABLE = st.none() | st.binary(max_size=300)
HEADERS = st.lists(st.tuples(st.text(max_size=20), NULLABLE), max_size=5)


def test_record_bytes_follow_the_v2_layout() -> None:
    out = bytearray()
    written = encode_record(out, 1, 2, None, b"a", [("h", None)])
    # length=10, attributes=0, tsDelta=2, offsetDelta=1, key=null, value="a",
    # one header: key "h", value null
    assert out.hex() == "14" + "00" + "04" + "02" + "01" + "02" + "61" + "02" + "02" + "68" + "01"
    assert written == len(out)


def test_smallest_record_is_seven_bytes() -> None:
    out = bytearray()
    assert encode_record(out, 0, 0, None, None) == MIN_RECORD_SIZE


@given(
    offset_delta=st.integers(0, 2**31 - 1),
    timestamp_delta=st.integers(-(2**40), 2**40),
    key=NULLABLE,
    value=NULLABLE,
    headers=HEADERS,
    base_offset=st.integers(0, 2**40),
    base_timestamp=st.integers(0, 2**41),
)
def test_records_round_trip(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
    base_offset: int,
    base_timestamp: int,
) -> None:
    out = bytearray(b"prefix")
    encode_record(out, offset_delta, timestamp_delta, key, value, headers)
    record, end = decode_record(bytes(out), 6, base_offset, base_timestamp)
    assert end == len(out)
    assert record == Record(
        base_offset + offset_delta,
        base_timestamp + timestamp_delta,
        key,
        value,
        tuple(headers),
    )


def test_log_append_time_replaces_the_record_timestamp() -> None:
    out = bytearray()
    encode_record(out, 0, 5, b"k", b"v")
    record, _ = decode_record(out, 0, 0, 100, log_append_time=999)
    assert record.timestamp == 999


def _encoded(*, key: bytes | None = b"k", headers: list[tuple[str, bytes | None]]) -> bytearray:
    out = bytearray()
    encode_record(out, 0, 0, key, b"v", headers)
    return out


def test_truncated_record_is_corrupt() -> None:
    out = _encoded(headers=[("a", b"b")])
    for cut in range(len(out)):
        with pytest.raises(CorruptRecordError):
            decode_record(bytes(out[:cut]), 0, 0, 0)


def test_length_that_disagrees_with_the_fields_is_corrupt() -> None:
    out = _encoded(headers=[])
    out[0] += 2  # two bytes longer than its fields
    out += b"\x00\x00"
    with pytest.raises(CorruptRecordError):
        decode_record(bytes(out), 0, 0, 0)


def test_negative_header_count_and_null_header_key_are_corrupt() -> None:
    out = _encoded(headers=[])
    out[-1] = 0x01  # header count -1
    with pytest.raises(CorruptRecordError):
        decode_record(bytes(out), 0, 0, 0)
    out = _encoded(headers=[("k", None)])
    out[-3] = 0x01  # header key length -1
    with pytest.raises(CorruptRecordError):
        decode_record(bytes(out), 0, 0, 0)


def test_header_key_that_is_not_utf8_is_corrupt() -> None:
    out = _encoded(headers=[("k", None)])
    out[-2] = 0xFF
    with pytest.raises(CorruptRecordError):
        decode_record(bytes(out), 0, 0, 0)
