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
    "decode_varint",
    "decode_varlong",
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


# The single byte of each value in -64..63, the common case for lengths and deltas.
_ONE_BYTE: dict[int, bytes] = {v: bytes([_zigzag(v)]) for v in range(-64, 64)}


def _leb128(unsigned: int) -> bytes:
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """The zigzag varint bytes of a 32-bit signed ``value``."""
    small = _ONE_BYTE.get(value)
    if small is not None:
        return small
    if not _INT_MIN <= value <= _INT_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    return _leb128(_zigzag(value))


def encode_varlong(value: int) -> bytes:
    """The zigzag varlong bytes of a 64-bit signed ``value``."""
    small = _ONE_BYTE.get(value)
    if small is not None:
        return small
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return _leb128(_zigzag(value))


def sizeof_varint(value: int) -> int:
    """How many bytes ``encode_varint(value)`` takes."""
    return len(encode_varint(value))


def sizeof_varlong(value: int) -> int:
    """How many bytes ``encode_varlong(value)`` takes."""
    return len(encode_varlong(value))


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
