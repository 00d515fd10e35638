"""The two checksums: CRC-32C for v2 batches, CRC-32 for v0/v1 messages."""

from __future__ import annotations

import mmap

from hypothesis import given
from hypothesis import strategies as st

from tierlog.storage.records.crc import crc32, crc32c


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_crc32_check_value() -> None:
    assert crc32(b"123456789") == 0xCBF43926


@given(st.binary(), st.binary())
def test_running_crcs_chain_over_pieces(first: bytes, second: bytes) -> None:
    assert crc32c(second, crc32c(first)) == crc32c(first + second)
    assert crc32(second, crc32(first)) == crc32(first + second)


def test_crcs_read_views_and_maps_in_place() -> None:
    data = bytearray(b"xx123456789xx")
    assert crc32c(memoryview(data)[2:11]) == 0xE3069283
    with mmap.mmap(-1, 9) as region:
        region.write(b"123456789")
        assert crc32c(region) == 0xE3069283
