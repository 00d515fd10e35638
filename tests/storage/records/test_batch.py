"""v2 record batches, and the shallow header view of every magic."""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.storage.config import TimestampType
from tierlog.storage.errors import (
    CorruptRecordError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from tierlog.storage.records import (
    HEADER_READ_SIZE,
    LOG_OVERHEAD,
    V2_HEADER_SIZE,
    CompressionType,
    Record,
    SimpleRecord,
    build_batch,
    build_legacy_message_set,
    crc32c,
    crc_is_valid,
    decode_record_rows,
    decode_records,
    iter_batches,
    parse_header,
    patch_offsets,
    set_log_append_time,
    whole_batches_length,
)
from tierlog.storage.records.batch import header_size_for_magic

NULLABLE = st.none() | st.binary(max_size=200)
SIMPLE_RECORDS = st.lists(
    st.builds(
        SimpleRecord,
        key=NULLABLE,
        value=NULLABLE,
        timestamp=st.integers(0, 2**50),
        headers=st.lists(st.tuples(st.text(max_size=10), NULLABLE), max_size=3),
    ),
    min_size=1,
    max_size=20,
)


def _recrc(buf: bytearray, pos: int = 0) -> None:
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    struct.pack_into(">I", buf, pos + 17, crc32c(buf[pos + 21 : pos + 12 + length]))


def test_a_hand_built_batch_matches_build_batch_byte_for_byte() -> None:
    record = "0e" + "00" + "00" + "00" + "01" + "02" + "61" + "00"  # value "a", no key
    before_crc = (
        "0000000000000000"  # base offset 0
        + "00000039"  # length: 49 header bytes after it + 8 record bytes = 57
        + "ffffffff"  # partition leader epoch -1
        + "02"  # magic
    )
    after_crc = (
        "0000"  # attributes: no codec, CreateTime, not transactional, not control
        + "00000000"  # last offset delta
        + "00000000000003e8"  # base timestamp 1000
        + "00000000000003e8"  # max timestamp 1000
        + "ffffffffffffffff"  # producer id -1
        + "ffff"  # producer epoch -1
        + "ffffffff"  # base sequence -1
        + "00000001"  # record count
        + record
    )
    crc = crc32c(bytes.fromhex(after_crc))
    expected = bytes.fromhex(before_crc + f"{crc:08x}" + after_crc)
    assert build_batch([SimpleRecord(None, b"a", 1000)]) == expected


def test_header_fields_come_from_their_offsets() -> None:
    batch = build_batch(
        [SimpleRecord(b"k", b"v", 5), SimpleRecord(b"k", b"v", 3), SimpleRecord(None, None, 9)],
        compression=CompressionType.ZSTD,
        base_offset=42,
        producer_id=7,
        producer_epoch=2,
        base_sequence=11,
        partition_leader_epoch=4,
        is_transactional=True,
    )
    header = parse_header(batch[:HEADER_READ_SIZE], 0)
    assert (header.base_offset, header.last_offset, header.record_count) == (42, 44, 3)
    assert header.size == len(batch) and header.magic == 2
    assert header.compression is CompressionType.ZSTD and header.is_compressed
    assert header.timestamp_type is TimestampType.CREATE_TIME
    # The base timestamp is the first record's, not the smallest; max is the largest.
    assert (header.base_timestamp, header.max_timestamp) == (5, 9)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 11)
    assert header.partition_leader_epoch == 4 and header.last_sequence == 13
    assert header.is_transactional and not header.is_control
    assert header.delete_horizon_ms is None
    assert [r.timestamp for r in decode_records(batch, header)] == [5, 3, 9]


def test_attribute_bits() -> None:
    def attributes(**kwargs: object) -> int:
        batch = build_batch([SimpleRecord(b"k", b"v", 1)], **kwargs)  # type: ignore[arg-type]
        return int(struct.unpack_from(">h", batch, 21)[0])

    assert attributes(compression=CompressionType.LZ4) == 0x03
    lat = TimestampType.LOG_APPEND_TIME
    assert attributes(timestamp_type=lat, log_append_time_ms=9) == 0x08
    assert attributes(is_transactional=True, producer_id=1, producer_epoch=0) == 0x10
    assert attributes(is_control=True) == 0x20
    assert attributes(delete_horizon_ms=100) == 0x40


def test_delete_horizon_takes_the_base_timestamp() -> None:
    batch = build_batch(
        [SimpleRecord(b"k", b"v", 70), SimpleRecord(b"k", b"v", 80)], delete_horizon_ms=500
    )
    header = parse_header(batch)
    assert header.delete_horizon_ms == 500 == header.base_timestamp
    assert header.max_timestamp == 80
    assert [r.timestamp for r in decode_records(batch, header)] == [70, 80]


def test_log_append_time_batches_give_every_record_the_max_timestamp() -> None:
    batch = build_batch(
        [SimpleRecord(b"k", b"v", 1), SimpleRecord(b"k", b"v", 2)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time_ms=777,
    )
    header = parse_header(batch)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME and header.max_timestamp == 777
    assert [r.timestamp for r in decode_records(batch, header)] == [777, 777]


def test_records_without_timestamps_leave_max_at_minus_one() -> None:
    header = parse_header(build_batch([SimpleRecord(b"k", b"v")]))
    assert header.max_timestamp == -1 == header.base_timestamp


def test_building_refuses_no_records_and_bad_timestamps() -> None:
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError):
        build_batch([SimpleRecord(b"k", b"v", -2)])


@settings(max_examples=60, deadline=None)
@given(
    records=SIMPLE_RECORDS,
    codec=st.sampled_from(list(CompressionType)),
    base_offset=st.integers(0, 2**62),
    producer_id=st.integers(-1, 2**62),
)
def test_batches_round_trip_for_every_codec(
    records: list[SimpleRecord], codec: CompressionType, base_offset: int, producer_id: int
) -> None:
    batch = build_batch(
        records, compression=codec, base_offset=base_offset, producer_id=producer_id
    )
    header = parse_header(batch)
    assert crc_is_valid(batch, header)
    assert header.size == len(batch)
    assert header.last_offset == base_offset + len(records) - 1
    assert decode_records(batch, header) == [
        Record(base_offset + i, r.timestamp, r.key, r.value, tuple(r.headers))
        for i, r in enumerate(records)
    ]


def test_parse_header_reads_at_a_position_and_needs_only_the_header() -> None:
    batch = build_batch([SimpleRecord(b"k", b"v" * 1000, 1)])
    buf = b"junk" + batch[:V2_HEADER_SIZE]
    header = parse_header(buf, 4)
    assert header.position == 4 and header.end_position == 4 + len(batch)
    assert not crc_is_valid(buf, header)  # the bytes are not all there
    with pytest.raises(CorruptRecordError):
        parse_header(buf[:-1], 4)


@pytest.mark.parametrize(("magic", "needed"), [(0, 18), (1, 26), (2, 61)])
def test_parse_header_needs_this_many_bytes_per_magic(magic: int, needed: int) -> None:
    if magic == 2:
        data = build_batch([SimpleRecord(b"k", b"v", 1)])
    else:
        data = build_legacy_message_set([SimpleRecord(b"k", b"v", 1)], magic=magic)
    assert header_size_for_magic(magic) == needed <= HEADER_READ_SIZE
    assert parse_header(data[:needed]).magic == magic
    with pytest.raises(CorruptRecordError):
        parse_header(data[: needed - 1])


def test_unknown_magic_or_short_length_is_corrupt() -> None:
    batch = bytearray(build_batch([SimpleRecord(b"k", b"v", 1)]))
    batch[16] = 3
    with pytest.raises(CorruptRecordError):
        parse_header(batch)
    batch[16] = 2
    struct.pack_into(">i", batch, 8, V2_HEADER_SIZE - LOG_OVERHEAD - 1)
    with pytest.raises(CorruptRecordError):
        parse_header(batch)
    with pytest.raises(CorruptRecordError):
        parse_header(b"\x00" * 16)


def test_unknown_codec_in_a_header_is_unsupported() -> None:
    batch = bytearray(build_batch([SimpleRecord(b"k", b"v", 1)]))
    batch[22] = 0x05
    with pytest.raises(UnsupportedCompressionTypeError):
        parse_header(batch)


def test_crc_covers_attributes_to_the_end_but_not_offset_or_leader_epoch() -> None:
    batch = build_batch([SimpleRecord(b"key", b"value", 1)] * 3, producer_id=3, producer_epoch=0)
    assert crc_is_valid(batch, parse_header(batch))
    for index in [*range(0, 8), *range(12, 16), *range(17, len(batch))]:
        flipped = bytearray(batch)
        flipped[index] ^= 0x01
        covered = index >= 17  # the CRC field itself, then attributes..end
        assert crc_is_valid(flipped, parse_header(flipped)) is not covered, index


def test_patch_offsets_keeps_the_crc_and_touches_only_its_fields() -> None:
    batch = build_batch([SimpleRecord(b"k", b"v", 1)] * 4, partition_leader_epoch=-1)
    buf = bytearray(batch)
    header = patch_offsets(buf, parse_header(buf), 1000, 9)
    assert header == parse_header(buf)
    assert (header.base_offset, header.last_offset, header.partition_leader_epoch) == (
        1000,
        1003,
        9,
    )
    assert header.crc == parse_header(batch).crc and crc_is_valid(buf, header)
    changed = [i for i in range(len(buf)) if buf[i] != batch[i]]
    assert all(i < 8 or 12 <= i < 16 for i in changed)
    assert [r.offset for r in decode_records(buf, header)] == [1000, 1001, 1002, 1003]


def test_set_log_append_time_rewrites_type_max_timestamp_and_crc() -> None:
    buf = bytearray(build_batch([SimpleRecord(b"k", b"v", 1), SimpleRecord(b"k", b"v", 2)]))
    header = set_log_append_time(buf, parse_header(buf), 5000)
    assert header == parse_header(buf) and crc_is_valid(buf, header)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME and header.max_timestamp == 5000
    assert [r.timestamp for r in decode_records(buf, header)] == [5000, 5000]
    before = bytes(buf)
    assert set_log_append_time(buf, header, 5000) is header and bytes(buf) == before


def test_patching_refuses_legacy_entries() -> None:
    buf = bytearray(build_legacy_message_set([SimpleRecord(b"k", b"v", 1)], magic=1))
    with pytest.raises(UnsupportedForMessageFormatError):
        patch_offsets(buf, parse_header(buf), 5, 0)
    with pytest.raises(UnsupportedForMessageFormatError):
        set_log_append_time(buf, parse_header(buf), 5)


def test_decoding_a_batch_whose_records_disagree_with_its_header_is_corrupt() -> None:
    batch = bytearray(build_batch([SimpleRecord(b"k", b"v", 1)] * 3))
    struct.pack_into(">i", batch, 57, 4)  # claims one record more than it holds
    _recrc(batch)
    with pytest.raises(CorruptRecordError):
        decode_records(batch, parse_header(batch))
    struct.pack_into(">i", batch, 57, 2)  # leaves a record unread
    _recrc(batch)
    with pytest.raises(CorruptRecordError):
        decode_records(batch, parse_header(batch))
    whole = build_batch([SimpleRecord(b"k", b"v", 1)])
    with pytest.raises(CorruptRecordError):
        decode_records(whole[:-1], parse_header(whole))


def test_a_record_that_overruns_its_batch_is_corrupt_though_more_bytes_follow() -> None:
    # In place in a fetch's bytes, the next batch lies right after: reading on into it
    # must still be caught.
    batch = bytearray(build_batch([SimpleRecord(b"k", b"v" * 100, 1)] * 2))
    batch[-103:-101] = b"\xd8\x04"  # the last value's length: 300, not 100
    _recrc(batch)
    following = build_batch([SimpleRecord(None, b"x" * 500, 2)])
    for buf in (bytes(batch) + following, bytearray(batch) + following):
        with pytest.raises(CorruptRecordError):
            decode_records(buf, parse_header(buf))


@given(SIMPLE_RECORDS, st.sampled_from(CompressionType))
def test_decode_record_rows_are_the_records_as_tuples(
    records: list[SimpleRecord], codec: CompressionType
) -> None:
    data = b"\x00" * 7 + build_batch(records, base_offset=40, compression=codec)
    rows = decode_record_rows(data, parse_header(data, 7))
    assert rows == [vars_of(r) for r in decode_records(data, parse_header(data, 7))]
    assert [(key, value) for _, _, key, value, _ in rows] == [(r.key, r.value) for r in records]


def vars_of(record: Record) -> tuple[object, ...]:
    return (record.offset, record.timestamp, record.key, record.value, record.headers)


def three_entries() -> tuple[bytes, bytes, bytes]:
    """A v2 batch at offset 0, a gzip one at 1-2 and a v1 message set at 3."""
    first = build_batch([SimpleRecord(b"a", b"1", 1)], base_offset=0)
    second = build_batch(
        [SimpleRecord(b"b", b"2", 2)] * 2, base_offset=1, compression=CompressionType.GZIP
    )
    legacy = build_legacy_message_set([SimpleRecord(b"c", b"3", 3)], magic=1, base_offset=3)
    return first, second, legacy


def test_iter_batches_walks_whole_entries_and_rejects_a_partial_tail() -> None:
    first, second, legacy = three_entries()
    buf = first + second + legacy
    headers = list(iter_batches(buf))
    assert [h.position for h in headers] == [0, len(first), len(first) + len(second)]
    assert [h.base_offset for h in headers] == [0, 1, 3]
    with pytest.raises(CorruptRecordError):
        list(iter_batches(buf[:-1]))


def test_whole_batches_length_stops_at_a_cut_entry_or_the_upper_bound() -> None:
    first, second, legacy = three_entries()
    buf = first + second + legacy
    ends = [0, len(first), len(first) + len(second), len(buf)]
    for cut in range(len(buf) + 1):
        assert whole_batches_length(buf[:cut]) == max(end for end in ends if end <= cut)
    assert whole_batches_length(buf, upper_bound_offset=3) == ends[2]
    assert whole_batches_length(buf, upper_bound_offset=2) == ends[1]  # 1-2 holds offset 2
    assert whole_batches_length(buf, upper_bound_offset=0) == 0


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda entry: entry[:8] + struct.pack(">i", -5) + entry[12:], id="negative"),
        pytest.param(lambda entry: entry[:8] + struct.pack(">i", 40) + entry[12:], id="too short"),
        pytest.param(lambda entry: entry[:16] + b"\x07" + entry[17:], id="unknown magic"),
        pytest.param(lambda entry: entry[:22] + b"\x07" + entry[23:], id="unknown codec"),
    ],
)
def test_whole_batches_length_stops_before_an_entry_that_cannot_be_one(
    damage: Callable[[bytes], bytes],
) -> None:
    """The whole entries before damage are an answer (a read starting at the damage is
    what refuses it), not a failure of the whole window."""
    first, second, legacy = three_entries()
    assert whole_batches_length(first + damage(second) + legacy) == len(first)
    assert whole_batches_length(damage(first) + second) == 0


def test_batches_read_in_place_from_a_mapped_file(tmp_path: Path) -> None:
    batches = [
        build_batch([SimpleRecord(b"k", b"v%d" % i, i)] * 2, base_offset=2 * i, compression=codec)
        for i, codec in enumerate(CompressionType)
    ]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as region:
        headers = list(iter_batches(region))
        assert all(crc_is_valid(region, header) for header in headers)
        offsets = [r.offset for header in headers for r in decode_records(region, header)]
    assert offsets == list(range(2 * len(batches)))
