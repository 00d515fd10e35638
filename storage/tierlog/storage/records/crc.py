"""The two checksums of Kafka's record formats.

v2 batches carry CRC-32C (Castagnoli) over attributes..end; v0/v1 messages carry the
classic CRC-32 (IEEE, zlib's) over magic..end. Both run in C over any buffer (bytes,
bytearray, memoryview, mmap) without copying it; ``value`` chains a running CRC so a
checksum can span several pieces.
"""

from __future__ import annotations

import zlib

import crc32c as _crc32c

from tierlog.storage.records.buffers import ReadableBuffer

__all__ = ["crc32", "crc32c"]


def crc32c(data: ReadableBuffer, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value`` (0 to start)."""
    result: int = _crc32c.crc32c(data, value)
    return result


def crc32(data: ReadableBuffer, value: int = 0) -> int:
    """CRC-32 (IEEE) of ``data``, continuing from ``value`` (0 to start)."""
    return zlib.crc32(data, value)
