"""Zigzag varints as Kafka's ByteUtils writes them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records.varint import (
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    sizeof_varint,
    sizeof_varlong,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (300, "d804"),
        (8191, "fe7f"),  # the last two-byte values, either sign
        (-8192, "ff7f"),
        (8192, "808001"),
        (2**31 - 1, "feffffff0f"),
        (-(2**31), "ffffffff0f"),
    ],
)
def test_varint_bytes_are_zigzag_leb128(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, "00"), (127, "7f"), (128, "8001"), (300, "ac02"), (2**64 - 1, "ff" * 9 + "01")],
)
def test_unsigned_varints_are_leb128_without_zigzag(value: int, encoded: str) -> None:
    assert encode_unsigned_varint(value).hex() == encoded


def test_varlong_extremes_take_ten_bytes() -> None:
    assert encode_varlong(-(2**63)).hex() == "ff" * 9 + "01"
    assert encode_varlong(2**63 - 1).hex() == "fe" + "ff" * 8 + "01"


@given(INT32, st.binary(max_size=3), st.binary(max_size=3))
def test_varint_round_trips_at_any_position(value: int, before: bytes, after: bytes) -> None:
    data = before + encode_varint(value) + after
    assert decode_varint(data, len(before)) == (value, len(data) - len(after))
    assert sizeof_varint(value) == len(encode_varint(value)) <= 5


@given(INT64)
def test_varlong_round_trips(value: int) -> None:
    data = encode_varlong(value)
    assert decode_varlong(memoryview(data), 0) == (value, len(data))
    assert sizeof_varlong(value) == len(data) <= 10


def test_out_of_range_values_are_refused() -> None:
    with pytest.raises(ValueError):
        encode_varint(2**31)
    with pytest.raises(ValueError):
        encode_varlong(-(2**63) - 1)


@pytest.mark.parametrize("data", ["", "80", "ffff", "ffffffff"])
def test_truncated_varint_is_corrupt(data: str) -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(bytes.fromhex(data), 0)
    with pytest.raises(CorruptRecordError):
        decode_varlong(bytes.fromhex(data), 0)


def test_overlong_varints_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(bytes.fromhex("808080808000"), 0)
    with pytest.raises(CorruptRecordError):
        decode_varlong(bytes.fromhex("80" * 10 + "00"), 0)


def test_reading_past_the_end_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x00", 1)
