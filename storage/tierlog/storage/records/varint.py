"""Zigzag varints, the integer encoding inside v2 records.

Kafka writes signed ints and longs zigzag-mapped (so small magnitudes of either sign
stay short) and then as unsigned LEB128: seven bits per byte, low group first, high
bit set on every byte but the last. An int takes at most 5 bytes and a long at most
10; a longer run, or one cut off by the end of the buffer, is a corrupt record.
"""

from __future__ import annotations

from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records.buffers import ReadableBuffer

__all__ = [
    "SMALL_LIMIT",
    "SMALL_MASK",
    "SMALL_MIN",
    "SMALL_VARINTS",
    "decode_varint",
    "decode_varlong",
    "encode_unsigned_varint",
    "encode_varint",
    "encode_varlong",
    "sizeof_varint",
    "sizeof_varlong",
]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def _zigzag(value: int) -> int:
    return (value << 1) if value >= 0 else ((-value) << 1) - 1


def encode_unsigned_varint(unsigned: int) -> bytes:
    """LEB128 of a non-negative ``unsigned``, no zigzag (Kafka's ``writeUnsignedVarint``;
    protobuf's varint too, which writes a negative int64 as its 64-bit two's complement)."""
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


# The one- and two-byte encodings, of -8192..8191, at ``value & SMALL_MASK`` (negative
# values land above the positive ones): the lengths, deltas and counts of nearly every
# record.  Producers encode several a record, so a table lookup beats the arithmetic.
SMALL_MIN, SMALL_LIMIT, SMALL_MASK = -8192, 8192, 0x3FFF
SMALL_VARINTS: tuple[bytes, ...] = tuple(
    encode_unsigned_varint(_zigzag(index if index < SMALL_LIMIT else index - 2 * SMALL_LIMIT))
    for index in range(2 * SMALL_LIMIT)
)


def encode_varint(value: int) -> bytes:
    """The zigzag varint bytes of a 32-bit signed ``value``."""
    if SMALL_MIN <= value < SMALL_LIMIT:
        return SMALL_VARINTS[value & SMALL_MASK]
    if not _INT_MIN <= value <= _INT_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    return encode_unsigned_varint(_zigzag(value))


def encode_varlong(value: int) -> bytes:
    """The zigzag varlong bytes of a 64-bit signed ``value``."""
    if SMALL_MIN <= value < SMALL_LIMIT:
        return SMALL_VARINTS[value & SMALL_MASK]
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return encode_unsigned_varint(_zigzag(value))


def sizeof_varint(value: int) -> int:
    """How many bytes ``encode_varint(value)`` takes: one per started 7 bits."""
    if not _INT_MIN <= value <= _INT_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    return ((((value << 1) ^ (value >> 63)).bit_length() + 6) // 7) or 1


def sizeof_varlong(value: int) -> int:
    """How many bytes ``encode_varlong(value)`` takes: one per started 7 bits."""
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return ((((value << 1) ^ (value >> 63)).bit_length() + 6) // 7) or 1


def _decode(buf: ReadableBuffer, pos: int, max_bytes: int, mask: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    end = len(buf)
    for i in range(pos, pos + max_bytes):
        if i >= end:
            raise CorruptRecordError(f"varint truncated at byte {i}")
        byte = buf[i]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            raw &= mask
            return (raw >> 1) ^ -(raw & 1), i + 1
        shift += 7
    raise CorruptRecordError(f"varint longer than {max_bytes} bytes at {pos}")


def decode_varint(buf: ReadableBuffer, pos: int) -> tuple[int, int]:
    """Read a zigzag varint at ``pos``; return ``(value, next_pos)``."""
    if 0 <= pos < len(buf):
        byte = buf[pos]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
    return _decode(buf, pos, 5, _MASK32)


def decode_varlong(buf: ReadableBuffer, pos: int) -> tuple[int, int]:
    """Read a zigzag varlong at ``pos``; return ``(value, next_pos)``."""
    if 0 <= pos < len(buf):
        byte = buf[pos]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
    return _decode(buf, pos, 10, _MASK64)
