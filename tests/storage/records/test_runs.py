"""Runs of records laid out alike, decoded at once."""

from __future__ import annotations

from tierlog.storage.records.record import encode_record
from tierlog.storage.records.runs import RecordLayout, decode_run

# A null key, a 10-byte value, one-byte deltas: 20 00 <ts> <offset> 01 14 <value> 00
# (16 bytes after the length).
LAYOUT = RecordLayout(b"\x20\x00", 1, 1, b"\x01", -1, b"\x14", 10, 17)


def section(count: int, timestamp_delta: int = 1) -> bytes:
    out = bytearray()
    for index in range(count):
        encode_record(out, index, timestamp_delta * index, None, bytes([index]) * 10)
    return bytes(out)


def test_a_run_is_every_record_of_the_layout_up_to_the_first_that_differs() -> None:
    data = section(80)  # deltas from 64 on take two bytes: another layout
    rows, end = decode_run(data, 0, len(data), LAYOUT, 1000, 100, 5000, None)
    assert rows == [(100 + i, 5000 + i, None, bytes([i]) * 10, ()) for i in range(64)]
    assert end == 64 * LAYOUT.record_size


def test_a_run_stops_at_its_limit_and_at_its_end() -> None:
    data = section(20)
    rows, end = decode_run(data, 0, len(data), LAYOUT, 5, 0, 0, None)
    assert (len(rows), end) == (5, 5 * LAYOUT.record_size)
    rows, end = decode_run(data, 0, 3 * LAYOUT.record_size + 2, LAYOUT, 100, 0, 0, None)
    assert (len(rows), end) == (3, 3 * LAYOUT.record_size)


def test_no_run_where_the_first_record_differs() -> None:
    data = section(10, timestamp_delta=100)  # two-byte timestamp deltas from the second on
    assert decode_run(data, LAYOUT.record_size, len(data), LAYOUT, 100, 0, 0, None) == (
        [],
        LAYOUT.record_size,
    )
