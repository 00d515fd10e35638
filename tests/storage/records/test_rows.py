"""Decoding a batch's records into rows, checked against the one-record decoder.

``decode_record`` (``record.py``) is a separate, plain implementation of the record
layout; the rows decoder, with its runs of records laid out alike, must agree with
it on every records section: the same rows when both accept it, and
``CorruptRecordError`` from both when one does not.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records.record import decode_record, encode_record
from tierlog.storage.records.rows import RecordRow, decode_v2_rows

BASE_OFFSET, BASE_TIMESTAMP = 1000, 1_700_000_000_000

# Deltas around the varint widths' edges: one byte below 64, two below 8192, more above.
DELTAS = st.integers(0, 70) | st.integers(8180, 8200) | st.integers(0, 2**20)


@st.composite
def records_sections(draw: st.DrawFn) -> tuple[bytes, int]:
    """Records as producers write them: runs of one key and value size, deltas that
    grow, the odd record with headers or another size; and how many there are."""
    out = bytearray()
    count = 0
    for _ in range(draw(st.integers(1, 4))):
        key_size = draw(st.sampled_from([None, 0, 3]))
        value_size = draw(st.sampled_from([None, 0, 10, 200]))
        headers = draw(st.sampled_from([(), (), (("h", b"v"),)]))
        for _ in range(draw(st.integers(1, 150))):
            key = (
                None if key_size is None else draw(st.binary(min_size=key_size, max_size=key_size))
            )
            value = None if value_size is None else bytes([count % 256]) * value_size
            timestamp_delta = count // 3 if draw(st.booleans()) else draw(DELTAS)
            encode_record(out, count, timestamp_delta, key, value, headers)
            count += 1
    return bytes(out), count


def rows_or_error(data: bytes, count: int) -> list[RecordRow] | str:
    try:
        return decode_v2_rows(data, 0, len(data), count, BASE_OFFSET, BASE_TIMESTAMP, None)
    except CorruptRecordError:
        return "corrupt"


def reference_rows_or_error(data: bytes, count: int) -> list[RecordRow] | str:
    rows: list[RecordRow] = []
    pos = 0
    try:
        for _ in range(count):
            record, pos = decode_record(data, pos, BASE_OFFSET, BASE_TIMESTAMP)
            rows.append((record.offset, record.timestamp, record.key, record.value, record.headers))
    except (CorruptRecordError, IndexError):
        return "corrupt"
    return rows if pos == len(data) else "corrupt"


@given(records_sections())
def test_rows_are_the_records(section: tuple[bytes, int]) -> None:
    data, count = section
    assert rows_or_error(data, count) == reference_rows_or_error(data, count)
    assert rows_or_error(data, count) != "corrupt"


@given(records_sections(), st.data())
def test_a_damaged_section_decodes_as_the_reference_decodes_it(
    section: tuple[bytes, int], data: st.DataObject
) -> None:
    original, count = section
    damaged = bytearray(original)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    assert rows_or_error(bytes(damaged), count) == reference_rows_or_error(bytes(damaged), count)


@given(records_sections(), st.integers(-3, 3))
def test_a_wrong_record_count_is_corrupt(section: tuple[bytes, int], error: int) -> None:
    data, count = section
    wrong = max(0, count + error)
    if wrong != count:
        assert rows_or_error(data, wrong) == "corrupt"


def test_log_append_time_replaces_every_timestamp_in_runs_too() -> None:
    out = bytearray()
    for index in range(100):
        encode_record(out, index, index, None, b"v" * 10)
    rows = decode_v2_rows(bytes(out), 0, len(out), 100, 0, 5, 42)
    assert [row[:2] for row in rows] == [(index, 42) for index in range(100)]
