"""v0/v1 message sets: the bytes of a message, wrappers and their inner offsets."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.storage.config import TimestampType
from tierlog.storage.errors import CorruptRecordError, InvalidRecordError
from tierlog.storage.records import (
    CompressionType,
    Record,
    SimpleRecord,
    build_legacy_message_set,
    crc_is_valid,
    decode_records,
    decompress,
    iter_batches,
    parse_header,
    resolve_legacy_header,
)
from tierlog.storage.records.legacy import encode_message, parse_message

NULLABLE = st.none() | st.binary(max_size=200)
RECORDS = st.lists(
    st.builds(SimpleRecord, key=NULLABLE, value=NULLABLE, timestamp=st.integers(0, 2**50)),
    min_size=1,
    max_size=15,
)


def test_a_hand_built_v1_message_matches_the_builder() -> None:
    body = (
        "01"  # magic
        + "00"  # attributes
        + "00000000000003e8"  # timestamp 1000
        + "ffffffff"  # null key
        + "00000001"  # value length
        + "61"  # "a"
    )
    crc = zlib.crc32(bytes.fromhex(body))
    expected = bytes.fromhex("0000000000000007" + "00000017" + f"{crc:08x}" + body)
    assert (
        build_legacy_message_set([SimpleRecord(None, b"a", 1000)], magic=1, base_offset=7)
        == expected
    )


def test_a_hand_built_v0_message_has_no_timestamp() -> None:
    body = "00" + "00" + "00000001" + "6b" + "ffffffff"  # key "k", null value
    crc = zlib.crc32(bytes.fromhex(body))
    expected = bytes.fromhex("0000000000000000" + "0000000f" + f"{crc:08x}" + body)
    assert build_legacy_message_set([SimpleRecord(b"k", None, 55)], magic=0) == expected
    header = parse_header(expected)
    assert (header.magic, header.max_timestamp, header.record_count) == (0, -1, 1)
    assert header.timestamp_type is TimestampType.CREATE_TIME


@settings(max_examples=60, deadline=None)
@given(
    records=RECORDS,
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from([codec for codec in CompressionType if codec != CompressionType.ZSTD]),
    base_offset=st.integers(0, 2**60),
)
def test_message_sets_round_trip(
    records: list[SimpleRecord], magic: int, codec: CompressionType, base_offset: int
) -> None:
    data = build_legacy_message_set(
        records, magic=magic, compression=codec, base_offset=base_offset
    )
    decoded: list[Record] = []
    for header in iter_batches(data):
        assert crc_is_valid(data, header)
        decoded += decode_records(data, header)
    assert decoded == [
        Record(base_offset + i, r.timestamp if magic == 1 else -1, r.key, r.value)
        for i, r in enumerate(records)
    ]


def _inner_offsets(wrapper: bytes) -> list[int]:
    message, _ = parse_message(wrapper, 0)
    assert message.value is not None
    data = decompress(message.compression, message.value, magic=message.magic)
    offsets, pos = [], 0
    while pos < len(data):
        inner, pos = parse_message(data, pos)
        offsets.append(inner.offset)
    return offsets


def test_v1_wrapper_carries_the_last_offset_and_relative_inner_offsets() -> None:
    records = [SimpleRecord(b"k", b"v", t) for t in (30, 10, 20)]
    wrapper = build_legacy_message_set(
        records, magic=1, compression=CompressionType.GZIP, base_offset=100
    )
    header = parse_header(wrapper)
    assert header.last_offset == 102 and header.max_timestamp == 30
    assert header.record_count == -1 and header.base_offset == 102  # shallow: unknown
    assert _inner_offsets(wrapper) == [0, 1, 2]
    resolved = resolve_legacy_header(wrapper, header)
    assert (resolved.base_offset, resolved.record_count) == (100, 3)


def test_v0_wrapper_inner_offsets_are_absolute() -> None:
    records = [SimpleRecord(b"k", b"v")] * 3
    wrapper = build_legacy_message_set(
        records, magic=0, compression=CompressionType.SNAPPY, base_offset=100
    )
    assert parse_header(wrapper).last_offset == 102
    assert _inner_offsets(wrapper) == [100, 101, 102]


def test_v1_inner_offsets_with_gaps_resolve_against_the_wrapper_offset() -> None:
    # After compaction a wrapper may hold relative offsets 0, 2, 5 ending at offset 205.
    inner = b"".join(encode_message(rel, 1, 0, 7, b"k", b"v%d" % rel) for rel in (0, 2, 5))
    value = zlib.compressobj(6, zlib.DEFLATED, 31)
    wrapper = encode_message(205, 1, 1, 7, None, value.compress(inner) + value.flush())
    records = decode_records(wrapper, parse_header(wrapper))
    assert [(r.offset, r.value) for r in records] == [(200, b"v0"), (202, b"v2"), (205, b"v5")]


def test_log_append_time_wrapper_stamps_every_inner_message() -> None:
    records = [SimpleRecord(b"k", b"v", 1), SimpleRecord(b"k", b"v", 2)]
    wrapper = build_legacy_message_set(
        records,
        magic=1,
        compression=CompressionType.LZ4,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time_ms=999,
    )
    header = parse_header(wrapper)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME and header.max_timestamp == 999
    assert [r.timestamp for r in decode_records(wrapper, header)] == [999, 999]


def test_magic_0_lz4_wrapper_uses_the_broken_frame_checksum_and_still_reads() -> None:
    records = [SimpleRecord(b"k", b"v")] * 2
    wrapper = build_legacy_message_set(records, magic=0, compression=CompressionType.LZ4)
    message, _ = parse_message(wrapper, 0)
    assert message.value is not None and message.value[:7].hex() == "04224d1860401a"
    assert [r.offset for r in decode_records(wrapper, parse_header(wrapper))] == [0, 1]


def test_inner_message_with_a_bad_crc_is_corrupt() -> None:
    inner = bytearray(encode_message(0, 1, 0, 7, b"k", b"v"))
    inner[-1] ^= 0xFF
    value = zlib.compressobj(6, zlib.DEFLATED, 31)
    wrapper = encode_message(0, 1, 1, 7, None, value.compress(bytes(inner)) + value.flush())
    with pytest.raises(CorruptRecordError):
        decode_records(wrapper, parse_header(wrapper))


def test_nested_or_mismatched_magic_inner_messages_are_corrupt() -> None:
    for inner in (
        encode_message(0, 1, 1, 7, None, b"x"),  # compressed inside compressed
        encode_message(0, 0, 0, -1, b"k", b"v"),  # v0 inside a v1 wrapper
    ):
        value = zlib.compressobj(6, zlib.DEFLATED, 31)
        wrapper = encode_message(0, 1, 1, 7, None, value.compress(inner) + value.flush())
        with pytest.raises(CorruptRecordError):
            decode_records(wrapper, parse_header(wrapper))


def test_message_fields_overrunning_its_size_are_corrupt() -> None:
    message = bytearray(build_legacy_message_set([SimpleRecord(b"k", b"v", 1)], magic=1))
    struct.pack_into(">i", message, 26, 50)  # key length beyond the message
    struct.pack_into(">I", message, 12, zlib.crc32(message[16:]))
    with pytest.raises(CorruptRecordError):
        decode_records(message, parse_header(message))


def test_builder_refuses_what_old_formats_cannot_hold() -> None:
    with pytest.raises(ValueError):
        build_legacy_message_set([SimpleRecord(b"k", b"v", 1, [("h", b"x")])], magic=1)
    with pytest.raises(ValueError):
        build_legacy_message_set(
            [SimpleRecord(b"k", b"v")], magic=0, timestamp_type=TimestampType.LOG_APPEND_TIME
        )
    with pytest.raises(ValueError):
        build_legacy_message_set([SimpleRecord(b"k", b"v")], magic=2)


@pytest.mark.parametrize("magic", [0, 1])
def test_a_zstd_legacy_wrapper_is_invalid_as_in_kafka(magic: int) -> None:
    records = [SimpleRecord(b"k", b"v", 1_700_000_000_000)] * 3
    data = build_legacy_message_set(records, magic=magic, compression=CompressionType.ZSTD)
    (header,) = iter_batches(data)
    assert crc_is_valid(data, header)  # its CRC holds; its codec is what is wrong
    with pytest.raises(InvalidRecordError, match="zstd"):
        decode_records(data, header)
