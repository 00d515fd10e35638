"""v0/v1 message sets (magic 0 and 1): read everywhere, written only for tests and tools.

An entry is ``offset:int64 | size:int32 | crc:uint32 | magic:int8 | attributes:int8 |
[timestamp:int64, v1 only] | keyLength:int32 | key | valueLength:int32 | value`` with
-1 lengths for null, and a CRC-32 over magic..end.  Attributes bits 0-2 are the
codec and, in v1, bit 3 the timestamp type.

A compressed entry is a *wrapper*: null key, value = a compressed message set of
inner messages.  The wrapper's offset is the offset of its last inner message.
Inner v0 offsets are absolute; inner v1 offsets are relative (0, 1, ...), made
absolute as ``wrapper offset - last inner offset + inner offset``.  In a LogAppendTime
v1 wrapper, every inner message takes the wrapper's timestamp.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from tierlog.storage.config import TimestampType
from tierlog.storage.errors import CorruptRecordError, InvalidRecordError
from tierlog.storage.records.buffers import ReadableBuffer
from tierlog.storage.records.codecs import CompressionType, compress, compression_type, decompress
from tierlog.storage.records.crc import crc32
from tierlog.storage.records.record import Record, SimpleRecord

__all__ = [
    "LOG_OVERHEAD",
    "V1_TIMESTAMP_OFFSET",
    "LegacyMessage",
    "build_legacy_message_set",
    "decode_entry",
    "encode_message",
    "parse_message",
    "record_overhead",
]

LOG_OVERHEAD = 12  # offset:int64 + size:int32, in front of every entry of every magic
_CRC_OFFSET = LOG_OVERHEAD
_MAGIC_OFFSET = LOG_OVERHEAD + 4
V1_TIMESTAMP_OFFSET = _MAGIC_OFFSET + 2  # also where v0's key length starts
_TIMESTAMP_TYPE_MASK = 0x08
_CODEC_MASK = 0x07

_ENTRY = struct.Struct(">qiIbb")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def record_overhead(magic: int) -> int:
    """Bytes of a message (after the log overhead) with empty key and value: 14 or 22."""
    return 14 if magic == 0 else 22


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    """One v0/v1 message as stored; ``timestamp`` is -1 for v0."""

    offset: int
    magic: int
    attributes: int
    crc: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def compression(self) -> CompressionType:
        return compression_type(self.attributes & _CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 1 and self.attributes & _TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME


def _read_bytes(buf: ReadableBuffer, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError("message length field overruns the message")
    (length,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptRecordError(f"a {length}-byte field overruns the message")
    return bytes(buf[pos : pos + length]), pos + length


def parse_message(buf: ReadableBuffer, pos: int) -> tuple[LegacyMessage, int]:
    """The message whose entry starts at ``pos``, CRC checked; and where the next starts."""
    if pos + V1_TIMESTAMP_OFFSET > len(buf):
        raise CorruptRecordError(f"message header at {pos} is truncated")
    offset, size, crc, magic, attributes = _ENTRY.unpack_from(buf, pos)
    if magic not in (0, 1):
        raise CorruptRecordError(f"magic {magic} inside a v0/v1 message set")
    end = pos + LOG_OVERHEAD + size
    if size < record_overhead(magic) or end > len(buf):
        raise CorruptRecordError(f"message at {pos} declares an impossible size {size}")
    if crc32(memoryview(buf)[pos + _MAGIC_OFFSET : end]) != crc:
        raise CorruptRecordError(f"message at {pos} fails its CRC")
    cursor = pos + V1_TIMESTAMP_OFFSET
    timestamp = -1
    if magic == 1:
        (timestamp,) = _INT64.unpack_from(buf, cursor)
        cursor += 8
    key, cursor = _read_bytes(buf, cursor, end)
    value, cursor = _read_bytes(buf, cursor, end)
    if cursor != end:
        raise CorruptRecordError(f"message at {pos} holds bytes beyond its value")
    return LegacyMessage(offset, magic, attributes, crc, timestamp, key, value), end


def decode_entry(buf: ReadableBuffer, pos: int) -> list[Record]:
    """The records of the entry at ``pos``: itself, or a wrapper's inner messages."""
    message, _ = parse_message(buf, pos)
    if message.compression is CompressionType.NONE:
        return [Record(message.offset, message.timestamp, message.key, message.value)]
    if message.value is None:
        raise CorruptRecordError(f"compressed wrapper at {pos} has a null value")
    if message.compression is CompressionType.ZSTD:  # zstd arrived with v2, as in Kafka
        raise InvalidRecordError(f"v{message.magic} wrapper at {pos} claims zstd compression")
    data = decompress(message.compression, message.value, magic=message.magic)
    inner: list[LegacyMessage] = []
    cursor = 0
    while cursor < len(data):
        item, cursor = parse_message(data, cursor)
        if item.magic != message.magic:
            raise CorruptRecordError("inner message magic differs from its wrapper's")
        if item.compression is not CompressionType.NONE:
            raise CorruptRecordError("compressed message nested inside a compressed wrapper")
        inner.append(item)
    if not inner:
        raise CorruptRecordError(f"compressed wrapper at {pos} holds no messages")
    shift = message.offset - inner[-1].offset if message.magic == 1 else 0
    log_append = message.timestamp_type is TimestampType.LOG_APPEND_TIME
    return [
        Record(
            item.offset + shift,
            message.timestamp if log_append else item.timestamp,
            item.key,
            item.value,
        )
        for item in inner
    ]


def encode_message(
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
) -> bytes:
    """One whole entry (log overhead included) with its CRC."""
    body = bytearray()
    body.append(magic)
    body.append(attributes)
    if magic == 1:
        body += _INT64.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += _INT32.pack(-1)
        else:
            body += _INT32.pack(len(field))
            body += field
    head = _ENTRY.pack(offset, 4 + len(body), crc32(body), 0, 0)[: _CRC_OFFSET + 4]
    return head + bytes(body)


def build_legacy_message_set(
    records: Sequence[SimpleRecord],
    *,
    magic: int,
    compression: CompressionType = CompressionType.NONE,
    base_offset: int = 0,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time_ms: int = -1,
) -> bytes:
    """A v0/v1 message set of ``records`` at offsets ``base_offset``.., as Kafka wrote them.

    Uncompressed: one entry per record.  Compressed: one wrapper entry (offset = the
    last offset; v1 timestamp = the max inner timestamp, or the append time).
    LogAppendTime (v1 only) stamps ``log_append_time_ms`` on every message.
    """
    if magic not in (0, 1):
        raise ValueError(f"legacy message sets have magic 0 or 1, not {magic}")
    if not records:
        raise ValueError("a message set needs at least one record")
    log_append = timestamp_type is TimestampType.LOG_APPEND_TIME
    if magic == 0 and log_append:
        raise ValueError("magic 0 has no timestamps, so no LogAppendTime")
    if any(record.headers for record in records):
        raise ValueError(f"magic {magic} messages cannot carry headers")
    type_bit = _TIMESTAMP_TYPE_MASK if log_append else 0
    stamps = [log_append_time_ms if log_append else r.timestamp for r in records]
    if magic == 0:
        stamps = [-1] * len(records)
    compressed = compression is not CompressionType.NONE
    entries = b"".join(
        encode_message(
            (i if compressed and magic == 1 else base_offset + i),
            magic,
            type_bit,
            stamp,
            record.key,
            record.value,
        )
        for i, (record, stamp) in enumerate(zip(records, stamps, strict=True))
    )
    if not compressed:
        return entries
    return encode_message(
        base_offset + len(records) - 1,
        magic,
        int(compression) | type_bit,
        max(stamps),
        None,
        compress(compression, entries, magic=magic),
    )
