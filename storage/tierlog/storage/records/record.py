"""One v2 record: the unit inside a RecordBatch.

Layout (all lengths zigzag varints, -1 meaning null):
``length | attributes:int8 | timestampDelta:varlong | offsetDelta:varint |
keyLength | key | valueLength | value | headerCount | (keyLength key valueLength value)*``.
``length`` counts the bytes after itself; the deltas are relative to the batch's base
offset and base timestamp, so a record never changes when its batch is re-based.
Header keys are UTF-8 strings and never null; header values may be null.
A record whose fields do not exactly fill its declared length is corrupt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records.buffers import ReadableBuffer
from tierlog.storage.records.varint import (
    SMALL_LIMIT,
    SMALL_MASK,
    SMALL_MIN,
    SMALL_VARINTS,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

__all__ = [
    "MIN_RECORD_SIZE",
    "Header",
    "Record",
    "SimpleRecord",
    "decode_record",
    "encode_headers",
    "encode_record",
    "read_headers",
]

Header = tuple[str, bytes | None]

# length, attributes, timestamp delta, offset delta, key length, value length and
# header count, one byte each: no record can be shorter.
MIN_RECORD_SIZE = 7

_NULL = encode_varint(-1)


@dataclass(frozen=True, slots=True)
class Record:
    """A record as read from a log: absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class SimpleRecord:
    """A record to write: offsets are assigned by its position in the batch."""

    key: bytes | None = None
    value: bytes | None = None
    timestamp: int = -1
    headers: Sequence[Header] = field(default=())


def _nullable(data: bytes | None) -> bytes:
    if data is None:
        return _NULL
    return encode_varint(len(data)) + data


def encode_headers(headers: Sequence[Header]) -> bytes:
    """The header count and the headers, as they end a record."""
    parts = [encode_varint(len(headers))]
    for header_key, header_value in headers:
        parts.append(_nullable(header_key.encode("utf-8")))
        parts.append(_nullable(header_value))
    return b"".join(parts)


_NO_HEADERS = encode_varint(0)


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> int:
    """Append one record to ``out``; return the bytes written (length prefix included).

    Producers call this once per record, so it is written for speed: the varints of
    -8192..8191 come from a table, sizes are arithmetic, and the key and value are
    copied once, into ``out``.
    """
    timestamp = (
        SMALL_VARINTS[timestamp_delta & SMALL_MASK]
        if SMALL_MIN <= timestamp_delta < SMALL_LIMIT
        else encode_varlong(timestamp_delta)
    )
    offset = (
        SMALL_VARINTS[offset_delta]
        if 0 <= offset_delta < SMALL_LIMIT
        else encode_varint(offset_delta)
    )
    if key is None:
        key_head = _NULL
        key_size = 0
    else:
        key_size = len(key)
        key_head = SMALL_VARINTS[key_size] if key_size < SMALL_LIMIT else encode_varint(key_size)
    if value is None:
        value_head = _NULL
        value_size = 0
    else:
        value_size = len(value)
        value_head = (
            SMALL_VARINTS[value_size] if value_size < SMALL_LIMIT else encode_varint(value_size)
        )
    tail = encode_headers(headers) if headers else _NO_HEADERS
    # 1: the attributes byte, always 0 in v2
    body_size = (
        1 + len(timestamp) + len(offset) + len(key_head) + key_size + len(value_head) + value_size
    ) + len(tail)
    prefix = SMALL_VARINTS[body_size] if body_size < SMALL_LIMIT else encode_varint(body_size)
    # One join of the short fields, then the key and value copied once each, into ``out``.
    if key is None:
        out += b"".join((prefix, b"\x00", timestamp, offset, key_head, value_head))
    else:
        out += b"".join((prefix, b"\x00", timestamp, offset, key_head))
        out += key
        out += value_head
    if value is not None:
        out += value
    out += tail
    return len(prefix) + body_size


def _read_nullable(buf: ReadableBuffer, pos: int, end: int) -> tuple[bytes | None, int]:
    byte = buf[pos] if pos < end else 0x80
    if byte < 0x80:  # one-byte length, the common case, read inline
        length, pos = (byte >> 1) ^ -(byte & 1), pos + 1
    else:
        length, pos = decode_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptRecordError(f"a {length}-byte field overruns its record")
    return bytes(buf[pos : pos + length]), pos + length


def decode_record(
    buf: ReadableBuffer,
    pos: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None = None,
) -> tuple[Record, int]:
    """Read the record at ``pos``; return it (absolute offset and timestamp) and the next pos.

    ``log_append_time``, when given, replaces every record's timestamp (LogAppendTime
    batches keep the append time only in the batch header).
    """
    length, pos = decode_varint(buf, pos)
    end = pos + length
    if length < MIN_RECORD_SIZE - 1 or end > len(buf):
        raise CorruptRecordError(f"record length {length} at {pos} is invalid or overruns")
    timestamp_delta, pos = decode_varlong(buf, pos + 1)  # after the attributes byte
    offset_delta, pos = decode_varint(buf, pos)
    key, pos = _read_nullable(buf, pos, end)
    value, pos = _read_nullable(buf, pos, end)
    count, pos = decode_varint(buf, pos)
    headers: tuple[Header, ...] = ()
    if count:
        headers, pos = read_headers(buf, pos, end, count)
    if pos != end:
        raise CorruptRecordError(f"record declares {length} bytes but its fields end elsewhere")
    timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
    return Record(base_offset + offset_delta, timestamp, key, value, headers), end


def read_headers(
    buf: ReadableBuffer, pos: int, end: int, count: int
) -> tuple[tuple[Header, ...], int]:
    if count < 0 or count > end - pos:
        raise CorruptRecordError(f"invalid header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        raw_key, pos = _read_nullable(buf, pos, end)
        if raw_key is None:
            raise CorruptRecordError("a record header has a null key")
        header_value, pos = _read_nullable(buf, pos, end)
        try:
            headers.append((raw_key.decode("utf-8"), header_value))
        except UnicodeDecodeError as exc:
            raise CorruptRecordError("a record header key is not UTF-8") from exc
    return tuple(headers), pos
