"""Runs of records laid out alike, decoded by C-level calls: the consumer's fast path.

A producer's batch is mostly runs of records with the same layout: the same length,
attributes, key and value sizes, no headers, and timestamp and offset deltas of the
same varint width (one byte below 64, two below 8192).  In such a run every field
sits at a fixed place, so one regular expression matches the whole run and a second
one's ``findall`` cuts out each record's deltas, key and value; the deltas go through
a table of the one- and two-byte varints and the rows are zipped together.  No Python
bytecode runs per record, which makes a run about three times cheaper to decode than
the record-at-a-time loop (``rows``), the value's copy being most of what is left.

The patterns are built from a ``RecordLayout`` taken from a record the careful loop
has just checked, and every part of them is fixed-width, so a record they match has
that record's checked structure (its length, its fields ending where it ends) and only
its delta values and key and value bytes differ.  Varints of other widths and
non-minimal encodings do not match: those records go through the careful loop.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from itertools import repeat
from operator import add
from typing import NamedTuple

from tierlog.storage.records.record import Header
from tierlog.storage.records.varint import SMALL_LIMIT, SMALL_VARINTS, encode_varint

__all__ = [
    "RecordLayout",
    "RecordRow",
    "decode_run",
    "has_patterns",
    "is_checkable",
    "is_decodable",
    "match_run",
    "offset_deltas_count_up",
    "timestamp_deltas",
]

RecordRow = tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]

# One capture per varint width: a byte without, or a byte with and a last byte without
# the continuation bit (non-zero, so the encoding is the minimal one of its value).
_VARINT_OF_WIDTH = {
    1: rb"([\x00-\x7f])",
    2: rb"([\x80-\xff][\x01-\x7f])",
    3: rb"([\x80-\xff][\x80-\xff][\x01-\x7f])",  # offset deltas 8192.., checked, not decoded
}
# Compiled patterns kept at most; a stream of ever new layouts starts again.
_MAX_PATTERNS = 128


class RecordLayout(NamedTuple):
    """Where a record's fields lie, for the records that share it."""

    prefix: bytes  # the length varint and the attributes byte, as they are
    timestamp_delta_width: int  # 1 or 2 bytes
    offset_delta_width: int  # 1 or 2 bytes
    key_length: bytes  # the key's length varint, as it is
    key_size: int  # -1: null
    value_length: bytes
    value_size: int  # -1: null
    record_size: int  # all of it, with the length varint and the header count (zero)


class _Patterns(NamedTuple):
    run: re.Pattern[bytes]  # one or more records of the layout, back to back
    record: re.Pattern[bytes]  # one record, capturing the deltas, key and value


_patterns: dict[RecordLayout, _Patterns] = {}


@functools.cache
def _small_varints() -> dict[bytes, int]:
    """Every one- and two-byte (minimal) varint's value, by its bytes (the encoder's
    table read backwards: it holds 0..8191, then -8192..-1)."""
    return {
        encoded: index if index < SMALL_LIMIT else index - 2 * SMALL_LIMIT
        for index, encoded in enumerate(SMALL_VARINTS)
    }


def has_patterns(layout: RecordLayout) -> bool:
    return layout in _patterns


def _patterns_of(layout: RecordLayout) -> _Patterns:
    found = _patterns.get(layout)
    if found is not None:
        return found
    if len(_patterns) >= _MAX_PATTERNS:
        _patterns.clear()
    record = b"".join(
        (
            re.escape(layout.prefix),
            _VARINT_OF_WIDTH[layout.timestamp_delta_width],
            _VARINT_OF_WIDTH[layout.offset_delta_width],
            re.escape(layout.key_length),
            b"(.{%d})" % layout.key_size if layout.key_size >= 0 else b"",
            re.escape(layout.value_length),
            b"(.{%d})" % layout.value_size if layout.value_size >= 0 else b"",
            b"\x00",  # no headers
        )
    )
    made = _Patterns(re.compile(b"(?:%s)+" % record, re.DOTALL), re.compile(record, re.DOTALL))
    _patterns[layout] = made
    return made


def is_decodable(layout: RecordLayout) -> bool:
    """Whether ``decode_run`` takes runs of ``layout``: deltas of one or two bytes."""
    return layout.timestamp_delta_width <= 2 and layout.offset_delta_width <= 2


def decode_run(
    data: bytes,
    pos: int,
    end: int,
    layout: RecordLayout,
    limit: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> tuple[list[RecordRow], int]:
    """The rows of the records of ``layout`` from ``pos`` on (at most ``limit``, none
    past ``end``), and the position after them; no rows when the first does not match."""
    patterns = _patterns_of(layout)
    run = patterns.run.match(data, pos, end)
    if run is None:
        return [], pos
    found = patterns.record.findall(data, pos, run.end())
    del found[limit:]
    columns = iter(zip(*found, strict=True))
    timestamp_deltas, offset_deltas = next(columns), next(columns)
    keys: Iterable[bytes | None] = next(columns) if layout.key_size >= 0 else repeat(None)
    values: Iterable[bytes | None] = next(columns) if layout.value_size >= 0 else repeat(None)
    value_of = _small_varints().__getitem__
    offsets = map(add, repeat(base_offset), map(value_of, offset_deltas))
    timestamps: Iterable[int] = (
        repeat(log_append_time)
        if log_append_time is not None
        else map(add, repeat(base_timestamp), map(value_of, timestamp_deltas))
    )
    no_headers: tuple[Header, ...] = ()
    rows: list[RecordRow] = list(zip(offsets, timestamps, keys, values, repeat(no_headers)))
    return rows, pos + len(rows) * layout.record_size


# -- checking a run where it lies, for the produce validator: nothing made per record --

# A run's offset deltas take at most three bytes: 0..2**20-1.
_MAX_RUN_OFFSET_DELTAS = 1 << 20


@functools.cache
def _offset_delta_bytes(size: int) -> tuple[bytes, bytes, bytes]:
    """Byte 0, 1 and 2 (or the last, where shorter) of the minimal varint of each offset
    delta below ``size``: a run's offset-delta fields, read down its records with a
    stride, must be these from the run's first index on."""
    encoded = [encode_varint(delta) for delta in range(size)]
    first, second, third = (
        bytes(varint[min(place, len(varint) - 1)] for varint in encoded) for place in range(3)
    )
    return first, second, third


def is_checkable(layout: RecordLayout) -> bool:
    """Whether ``match_run`` and the checks below take runs of ``layout``."""
    return layout.timestamp_delta_width <= 2 and layout.offset_delta_width <= 3


def match_run(data: bytes, pos: int, end: int, layout: RecordLayout, limit: int) -> int:
    """How many records of ``layout`` (at most ``limit``, none past ``end``) lie back to
    back from ``pos``, their structure checked by one match of the run pattern."""
    run = _patterns_of(layout).run.match(data, pos, end)
    if run is None:
        return 0
    return min((run.end() - pos) // layout.record_size, limit)


def offset_deltas_count_up(
    data: bytes, pos: int, count: int, layout: RecordLayout, first: int
) -> bool:
    """Whether the ``count`` records of ``layout`` at ``pos`` have the offset deltas
    ``first``, ``first + 1``, ... in order."""
    after = first + count
    if after > _MAX_RUN_OFFSET_DELTAS:
        return False
    columns = _offset_delta_bytes(max(SMALL_LIMIT, 1 << (after - 1).bit_length()))
    at = pos + len(layout.prefix) + layout.timestamp_delta_width
    stop = pos + count * layout.record_size
    stride = layout.record_size
    return all(
        data[at + place : stop + place : stride] == columns[place][first:after]
        for place in range(layout.offset_delta_width)
    )


def timestamp_deltas(data: bytes, pos: int, count: int, layout: RecordLayout) -> set[int]:
    """The distinct timestamp deltas of the ``count`` records of ``layout`` at ``pos``
    (a producer's batch holds few: its records were made milliseconds apart)."""
    at = pos + len(layout.prefix)
    stop = pos + count * layout.record_size
    stride = layout.record_size
    value_of = _small_varints()
    if layout.timestamp_delta_width == 1:
        return {value_of[bytes((byte,))] for byte in set(data[at:stop:stride])}
    pairs = set(zip(data[at:stop:stride], data[at + 1 : stop + 1 : stride], strict=True))
    return {value_of[bytes(pair)] for pair in pairs}
