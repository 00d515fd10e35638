"""A v2 batch's records decoded into rows: ``(offset, timestamp, key, value, headers)``.

Every consumer pays this per record, so it is built for speed.  The careful loop
reads one record at a time (one- and two-byte varints inline, every read bounded by
the record's declared end or raising).  Once two records in a row share a layout
(``runs.RecordLayout``: same sizes and varint widths, no headers), the records that
follow with that layout are decoded as one run by C-level calls (``runs``), and the
careful loop takes over again at the first record that differs.  A section too large
to hold is walked through windows (``walk_v2_window``): each stops before the first
record its end cuts, and the next window starts there.  Plain tuples are
what both produce at C speed; a caller builds its own type from them (a
``NamedTuple`` subclass without a Python-level ``__init__`` keeps that speed).
"""

from __future__ import annotations

from collections.abc import Callable

from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records.record import MIN_RECORD_SIZE, Header, read_headers
from tierlog.storage.records.runs import (
    RecordLayout,
    RecordRow,
    decode_run,
    has_patterns,
    is_decodable,
)
from tierlog.storage.records.varint import decode_varint, decode_varlong

__all__ = [
    "RecordRow",
    "RunTaker",
    "cut_record_error",
    "decode_v2_rows",
    "walk_v2_records",
    "walk_v2_window",
]


# Takes the run of records of ``layout`` that may start at ``pos`` (at most ``limit``, none
# past ``end``; ``index`` records come before it) and adds to ``rows`` what its caller
# wants of them; returns how many it took and the position after them (0 and ``pos``
# when the first does not match: the careful loop then reads it).
RunTaker = Callable[[list[RecordRow], bytes, int, int, RecordLayout, int, int], tuple[int, int]]


def decode_v2_rows(
    data: bytes,
    pos: int,
    size: int,
    record_count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> list[RecordRow]:
    """The rows of the ``record_count`` records in ``data[pos:size]`` (a v2 batch's
    records section, decompressed); ``log_append_time`` replaces every timestamp.

    Raises ``CorruptRecordError`` when the records do not add up: a length, varint or
    field that overruns, fewer or more records than ``record_count``, trailing bytes.
    """

    def take_rows(
        rows: list[RecordRow],
        data: bytes,
        pos: int,
        end: int,
        layout: RecordLayout,
        limit: int,
        index: int,
    ) -> tuple[int, int]:
        if not is_decodable(layout):
            return 0, pos
        run, pos = decode_run(
            data, pos, end, layout, limit, base_offset, base_timestamp, log_append_time
        )
        rows += run
        return len(run), pos

    return walk_v2_records(
        data, pos, size, record_count, base_offset, base_timestamp, log_append_time, take_rows
    )


def walk_v2_records(
    data: bytes,
    pos: int,
    size: int,
    record_count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    take_run: RunTaker,
) -> list[RecordRow]:
    """``decode_v2_rows`` with its runs of alike records handed to ``take_run``: the rows
    of the records read one at a time, and whatever ``take_run`` added for the runs.

    The validator's taker checks a run's fields where they lie instead of making rows.
    """
    rows, pos, index = walk_v2_window(
        data, pos, size, 0, record_count, base_offset, base_timestamp, log_append_time, take_run
    )
    if index < record_count:
        raise cut_record_error(data, pos, size)
    return rows


def cut_record_error(data: bytes, pos: int, size: int) -> CorruptRecordError:
    """Why the records of a section end at ``pos``, short of their count, the section
    ending at ``size``."""
    if pos >= size:
        return CorruptRecordError("batch holds fewer records than it declares")
    try:
        length, pos = decode_varint(data, pos)
    except IndexError:
        return CorruptRecordError("batch holds fewer bytes than its records declare")
    return CorruptRecordError(f"record length {length} at {pos} is invalid or overruns")


def walk_v2_window(
    data: bytes,
    pos: int,
    size: int,
    first_index: int,
    record_count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    take_run: RunTaker,
) -> tuple[list[RecordRow], int, int]:
    """``walk_v2_records`` over the records that lie whole in ``data[pos:size]``, a window
    on a section whose records ``first_index`` to ``record_count - 1`` start at ``pos``:
    the rows, and the position and index of the first record not read, cut by the
    window's end (``record_count`` when all are).  What follows them in the section
    cannot make those read wrong, so a caller streams a section through windows.
    """
    try:
        rows: list[RecordRow] = []
        append = rows.append
        remaining = record_count - first_index
        last_layout: RecordLayout | None = None
        start = pos
        while remaining > 0:
            if pos >= size:
                break
            start = pos
            byte = data[pos]
            if byte < 0x80:
                length, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            elif data[pos + 1] < 0x80:  # two bytes: records of 64 B to 8 KiB
                length = (byte & 0x7F) | (data[pos + 1] << 7)
                length, pos = (length >> 1) ^ -(length & 1), pos + 2
            else:
                length, pos = decode_varint(data, pos)
            end = pos + length
            if length < MIN_RECORD_SIZE - 1:
                raise CorruptRecordError(f"record length {length} at {pos} is invalid or overruns")
            if end > size:
                return rows, start, record_count - remaining
            timestamp_at = pos + 1  # after the attributes byte
            byte = data[timestamp_at]
            if byte < 0x80:
                timestamp_delta, pos = (byte >> 1) ^ -(byte & 1), timestamp_at + 1
            elif data[timestamp_at + 1] < 0x80:
                timestamp_delta = (byte & 0x7F) | (data[timestamp_at + 1] << 7)
                timestamp_delta = (timestamp_delta >> 1) ^ -(timestamp_delta & 1)
                pos = timestamp_at + 2
            else:
                timestamp_delta, pos = decode_varlong(data, timestamp_at)
            offset_at = pos
            byte = data[pos]
            if byte < 0x80:
                offset_delta, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            elif data[pos + 1] < 0x80:  # two bytes: the 64th to the 8192nd record
                offset_delta = (byte & 0x7F) | (data[pos + 1] << 7)
                offset_delta, pos = (offset_delta >> 1) ^ -(offset_delta & 1), pos + 2
            else:
                offset_delta, pos = decode_varint(data, pos)
            key_at = pos
            byte = data[pos]
            if byte < 0x80:
                key_size, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            else:
                key_size, pos = decode_varint(data, pos)
            key_length_end = pos
            if key_size < 0:
                key = None
            else:
                key, pos = data[pos : pos + key_size], pos + key_size
            value_at = pos
            byte = data[pos]
            if byte < 0x80:
                value_size, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            elif data[pos + 1] < 0x80:
                value_size = (byte & 0x7F) | (data[pos + 1] << 7)
                value_size, pos = (value_size >> 1) ^ -(value_size & 1), pos + 2
            else:
                value_size, pos = decode_varint(data, pos)
            value_length_end = pos
            if value_size < 0:
                value = None
            else:
                value, pos = data[pos : pos + value_size], pos + value_size
            if pos >= end:
                raise CorruptRecordError("a record's key or value overruns it")
            headers: tuple[Header, ...] = ()
            no_headers = data[pos] == 0  # a count of zero in its one-byte form
            if no_headers:
                pos += 1
            else:
                count, pos = decode_varint(data, pos)
                headers, pos = read_headers(data, pos, end, count)
            if pos != end:
                raise CorruptRecordError(
                    f"record declares {length} bytes but its fields end elsewhere"
                )
            append(
                (
                    base_offset + offset_delta,
                    base_timestamp + timestamp_delta
                    if log_append_time is None
                    else log_append_time,
                    key,
                    value,
                    headers,
                )
            )
            remaining -= 1
            if remaining == 0 or not no_headers:
                last_layout = None
                continue
            layout = RecordLayout(
                data[start:timestamp_at],
                offset_at - timestamp_at,
                key_at - offset_at,
                data[key_at:key_length_end],
                key_size,
                data[value_at:value_length_end],
                value_size,
                end - start,
            )
            # Two alike in a row make a run likely: worth compiling its patterns for.
            if layout == last_layout or has_patterns(layout):
                taken, pos = take_run(
                    rows, data, pos, size, layout, remaining, record_count - remaining
                )
                remaining -= taken
            last_layout = layout
        if remaining == 0 and pos != size:
            raise CorruptRecordError("batch holds bytes beyond its declared records")
        return rows, pos, record_count - remaining
    except IndexError:  # a varint or field ran past the end of ``data``: no check per read
        if remaining and _length_is_cut(data, start, size):
            return rows, start, record_count - remaining
        raise CorruptRecordError("batch holds fewer bytes than its records declare") from None
    except CorruptRecordError:
        if remaining and _length_is_cut(data, start, size):
            return rows, start, record_count - remaining
        raise


def _length_is_cut(data: bytes, pos: int, size: int) -> bool:
    """Whether the window ends inside the length varint of the record at ``pos``."""
    return size - pos < 5 and all(byte >= 0x80 for byte in data[pos:size])
