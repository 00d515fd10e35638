"""Decompression bombs: small v2 batches whose compressed section decodes to far more.

Each is framed and checksummed like an honest batch (``lying_batches.framed_batch``), so
it passes every header check and only decoding it finds what it holds.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import zstandard

from tests.support.lying_batches import framed_batch
from tierlog.storage.records import CompressionType
from tierlog.storage.records.record import encode_record

__all__ = ["MiB", "bomb", "zeros"]

MiB = 1024 * 1024


def _records(count: int, value_bytes: int) -> Iterator[bytes]:
    """``count`` honest records of ``value_bytes`` zeros, a record at a time."""
    value = bytes(value_bytes)
    for delta in range(count):
        record = bytearray()
        encode_record(record, delta, 0, None, value)
        yield bytes(record)


def bomb(codec: CompressionType, count: int, value_bytes: int) -> bytes:
    """A batch whose section decodes to ``count`` records of ``value_bytes`` zeros."""
    if codec is CompressionType.GZIP:
        deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
        section = b"".join(deflater.compress(r) for r in _records(count, value_bytes))
        section += deflater.flush()
    else:  # zstd, without a content size, as Kafka's zstd-jni writes it
        compressor = zstandard.ZstdCompressor(level=1, write_content_size=False).compressobj()
        section = b"".join(compressor.compress(r) for r in _records(count, value_bytes))
        section += compressor.flush()
    return framed_batch(section, codec=codec, record_count=count)


def zeros(codec: CompressionType, size: int) -> bytes:
    """A batch whose section decodes to ``size`` zero bytes: no records at all."""
    compressor = zstandard.ZstdCompressor(level=1, write_content_size=False).compressobj()
    section = b"".join(compressor.compress(bytes(MiB)) for _ in range(size // MiB))
    return framed_batch(section + compressor.flush(), codec=codec, record_count=1)
