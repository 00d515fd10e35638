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
    "encode_record",
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


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> int:
    """Append one record to ``out``; return the bytes written (length prefix included)."""
    body = bytearray(b"\x00")  # attributes: unused in v2, always 0
    body += encode_varlong(timestamp_delta)
    body += encode_varint(offset_delta)
    body += _nullable(key)
    body += _nullable(value)
    body += encode_varint(len(headers))
    for header_key, header_value in headers:
        body += _nullable(header_key.encode("utf-8"))
        body += _nullable(header_value)
    prefix = encode_varint(len(body))
    out += prefix
    out += body
    return len(prefix) + len(body)


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
        headers, pos = _read_headers(buf, pos, end, count)
    if pos != end:
        raise CorruptRecordError(f"record declares {length} bytes but its fields end elsewhere")
    timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
    return Record(base_offset + offset_delta, timestamp, key, value, headers), end


def _read_headers(
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
