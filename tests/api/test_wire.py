"""Protobuf's wire primitives, against what protobuf writes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tierlog.api.v1 import log_service_pb2
from tierlog.api.wire import LENGTH_DELIMITED, VARINT, field_key, varint


@given(st.integers(-(2**63), 2**63 - 1))
def test_an_int64_field_is_its_key_and_varint(value: int) -> None:
    # FetchResponse.high_watermark is int64 field 2.
    expected = log_service_pb2.FetchResponse(high_watermark=value).SerializeToString()
    assert (field_key(2, VARINT) + varint(value) if value else b"") == expected


def test_negative_values_take_ten_bytes_and_keys_pack_number_and_type() -> None:
    assert varint(-1).hex() == "ff" * 9 + "01"
    assert field_key(4, LENGTH_DELIMITED) == b"\x22"
    assert field_key(16, VARINT).hex() == "8001"
