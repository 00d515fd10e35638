"""The columnar decoder, held equal to the row decoder on generated batches.

``RecordColumns`` (a native walk into Arrow's buffer layouts) must give the rows
``decode_record_rows`` gives for every batch it accepts, in every magic and codec, and
fail with ``CorruptRecordError`` exactly where the row decoder does: flipped bytes,
truncations, bad varints, lengths that overrun. A failed batch adds nothing.
"""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.storage.config import TimestampType
from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records import (
    BatchHeader,
    CompressionType,
    SimpleRecord,
    build_batch,
    build_legacy_message_set,
    decode_record_rows,
    iter_batches,
    parse_header,
)
from tierlog.storage.records.buffers import ReadableBuffer
from tierlog.storage.records.columnar import BinaryBuffers, ColumnBuffers, RecordColumns
from tierlog.storage.records.record import encode_record
from tierlog.storage.records.rows import RecordRow, decode_v2_rows
from tierlog.storage.records.varint import encode_varint

BASE_OFFSET, BASE_TIMESTAMP = 1000, 1_700_000_000_000
V2_RECORDS_AT = 61  # a v2 batch's records section starts after its header

NULLABLE_BYTES = st.none() | st.binary(max_size=40)
HEADERS = st.lists(st.tuples(st.text(max_size=6), NULLABLE_BYTES), max_size=3).map(tuple)
RECORDS = st.lists(
    st.builds(
        SimpleRecord,
        key=NULLABLE_BYTES,
        value=NULLABLE_BYTES | st.binary(min_size=100, max_size=300),
        timestamp=st.integers(0, 2**41),
        headers=HEADERS,
    ),
    min_size=1,
    max_size=40,
)
CODECS = st.sampled_from(list(CompressionType))


def binary_values(column: BinaryBuffers, slots: int) -> list[bytes | None]:
    offsets = array("i")
    offsets.frombytes(column.offsets)
    assert len(offsets) == slots + 1
    return [
        None
        if column.validity is not None and not column.validity[slot // 8] >> (slot % 8) & 1
        else bytes(column.data[offsets[slot] : offsets[slot + 1]])
        for slot in range(slots)
    ]


def as_rows(columns: ColumnBuffers) -> list[RecordRow]:
    """The columns read back as the row decoder's tuples."""
    offsets, timestamps = array("q"), array("q")
    offsets.frombytes(columns.offsets)
    timestamps.frombytes(columns.timestamps_ms)
    keys = binary_values(columns.keys, columns.rows)
    values = binary_values(columns.values, columns.rows)
    headers: list[tuple[tuple[str, bytes | None], ...]] = [()] * columns.rows
    if columns.headers is not None:
        lists = array("i")
        lists.frombytes(columns.headers.lists)
        entries = lists[-1]
        header_keys = binary_values(columns.headers.keys, entries)
        header_values = binary_values(columns.headers.values, entries)
        headers = [
            tuple(
                ((header_keys[at] or b"").decode(), header_values[at])
                for at in range(lists[row], lists[row + 1])
            )
            for row in range(columns.rows)
        ]
    return list(zip(offsets, timestamps, keys, values, headers, strict=True))


def columnar_or_error(buffer: ReadableBuffer, header: BatchHeader) -> list[RecordRow] | str:
    columns = RecordColumns(include_headers=True)
    try:
        columns.add(buffer, header)
    except CorruptRecordError:
        assert len(columns) == 0  # a failed batch adds nothing
        return "corrupt"
    return as_rows(columns.take())


def rows_or_error(buffer: ReadableBuffer, header: BatchHeader) -> list[RecordRow] | str:
    try:
        return decode_record_rows(buffer, header)
    except CorruptRecordError:
        return "corrupt"


def decodes_as_rows(data: bytes, header: BatchHeader) -> list[RecordRow] | str:
    """The columnar decoder's outcome on ``data``, checked to be the row decoder's, from
    ``bytes`` and in place from another buffer with more bytes after the entry (as a
    segment's chunk has)."""
    outcome = rows_or_error(data, header)
    assert columnar_or_error(data, header) == outcome
    in_place = memoryview(bytearray(data) + b"\x01" * 16)
    assert columnar_or_error(in_place, header) == rows_or_error(in_place, header)
    return outcome


@given(RECORDS, CODECS, st.integers(0, 2**40), st.booleans())
def test_columns_are_the_rows_in_every_codec(
    records: list[SimpleRecord], codec: CompressionType, base_offset: int, log_append: bool
) -> None:
    data = build_batch(
        records,
        compression=codec,
        base_offset=base_offset,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        log_append_time_ms=1_700_000_000_000 if log_append else -1,
    )
    header = parse_header(data)
    assert decodes_as_rows(data, header) == decode_record_rows(data, header)


LEGACY_CODECS = st.sampled_from([c for c in CompressionType if c is not CompressionType.ZSTD])


@given(
    RECORDS.map(lambda rs: [SimpleRecord(r.key, r.value, r.timestamp) for r in rs]), LEGACY_CODECS
)
def test_v0_and_v1_message_sets_decode_as_rows(
    records: list[SimpleRecord], codec: CompressionType
) -> None:
    for magic in (0, 1):
        data = build_legacy_message_set(records, magic=magic, compression=codec, base_offset=7)
        for header in iter_batches(data):
            assert decodes_as_rows(data, header) == decode_record_rows(data, header)


@given(RECORDS, st.data())
def test_only_the_offsets_asked_for_are_kept(
    records: list[SimpleRecord], data: st.DataObject
) -> None:
    batch = build_batch(records, base_offset=BASE_OFFSET)
    low = data.draw(st.integers(BASE_OFFSET - 2, BASE_OFFSET + len(records) + 2))
    high = data.draw(st.integers(low, BASE_OFFSET + len(records) + 2))
    columns = RecordColumns(include_headers=True)
    columns.add(batch, parse_header(batch), low, high)
    expected = [
        row for row in decode_record_rows(batch, parse_header(batch)) if low <= row[0] < high
    ]
    assert as_rows(columns.take()) == expected


@given(RECORDS, CODECS, st.data())
def test_a_damaged_batch_fails_as_the_row_decoder_fails(
    records: list[SimpleRecord], codec: CompressionType, data: st.DataObject
) -> None:
    """Bytes flipped anywhere after the header (the CRC is not checked by decoders),
    or the batch cut short."""
    original = build_batch(records, compression=codec)
    header = parse_header(original)
    damaged = bytearray(original)
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(V2_RECORDS_AT, len(damaged) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    damaged = damaged[: data.draw(st.integers(V2_RECORDS_AT, len(damaged)))]
    decodes_as_rows(bytes(damaged), header)


@st.composite
def records_sections(draw: st.DrawFn) -> tuple[bytes, int]:
    """Records sections written field by field, then damaged: the record count off by
    some, varints too long or cut, lengths that overrun, header keys that are not UTF-8."""
    out = bytearray()
    count = draw(st.integers(1, 20))
    for index in range(count):
        headers = draw(st.sampled_from([(), (("h", b"v"),), (("k\u00e9", None),)]))
        encode_record(
            out,
            index,
            draw(st.integers(0, 2**20)),
            draw(NULLABLE_BYTES),
            draw(NULLABLE_BYTES),
            headers,
        )
    damaged = bytearray(out)
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(damaged)))
        damage = draw(
            st.sampled_from(
                [b"\xff", b"\x80\x80\x80\x80\x80\x80", encode_varint(2**20), b"\xc3\x28"]
            )
            | st.binary(min_size=1, max_size=3)
        )
        if draw(st.booleans()):
            damaged[at : at + len(damage)] = damage
        else:
            damaged[at:at] = damage
    return bytes(damaged), count + draw(st.sampled_from([0, 0, 0, -1, 1]))


@given(records_sections(), st.booleans())
def test_a_damaged_records_section_fails_as_the_row_decoder_fails(
    section: tuple[bytes, int], include_headers: bool
) -> None:
    """Decoded after rows already taken in (a split's earlier batches): a failure
    leaves exactly those."""
    data, count = section
    try:
        expected = decode_v2_rows(data, 0, len(data), count, BASE_OFFSET, BASE_TIMESTAMP, None)
    except CorruptRecordError:
        expected = []  # and so must the columnar decoder fail, adding nothing
        corrupt = True
    else:
        corrupt = False
    earlier = build_batch([SimpleRecord(b"k", None, 9, (("h", b"v"),))] * 3, base_offset=1)
    columns = RecordColumns(include_headers=include_headers)
    columns.add(earlier, parse_header(earlier))
    try:
        columns._columns.add_v2(  # a bare records section: no batch header to hold it
            data, 0, len(data), count, BASE_OFFSET, BASE_TIMESTAMP, None, 0, -(2**63), 2**63 - 1
        )
    except CorruptRecordError:
        assert corrupt
    else:
        assert not corrupt
    if not include_headers:
        expected = [(*row[:4], ()) for row in expected]
    earlier_rows = [
        (o, 9, b"k", None, (("h", b"v"),) if include_headers else ()) for o in (1, 2, 3)
    ]
    assert as_rows(columns.take()) == earlier_rows + expected


@pytest.mark.parametrize("include_headers", [True, False])
def test_a_corrupt_batch_leaves_the_rows_before_it(include_headers: bool) -> None:
    good = build_batch([SimpleRecord(b"k", b"v", 5, (("a", b"b"),))], base_offset=3)
    bad = bytearray(build_batch([SimpleRecord(b"k", b"v" * 20, 5)], base_offset=4))
    bad[V2_RECORDS_AT] = 0x7E  # the record's length, far past the batch
    columns = RecordColumns(include_headers=include_headers)
    columns.add(good, parse_header(good))
    try:
        columns.add(bytes(bad), parse_header(bytes(bad)))
    except CorruptRecordError:
        pass
    else:
        raise AssertionError("the overrunning length was accepted")
    headers = (("a", b"b"),) if include_headers else ()
    assert as_rows(columns.take()) == [(3, 5, b"k", b"v", headers)]
