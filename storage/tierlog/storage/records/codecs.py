"""Kafka's compression codecs, with the exact stream framing Kafka reads and writes.

A compressed batch's records section is one stream in the codec's Kafka framing:

* gzip: a plain gzip stream (members may follow one another);
* snappy: xerial's stream framing, an 8-byte magic ``\\x82SNAPPY\\x00``, version 1 and
  compatible-version 1 as big-endian int32s, then ``[int32 BE length][raw snappy
  block]`` chunks of at most 32 KiB of input each; readers also take a bare raw
  snappy block, as xerial's reader does when the magic is absent;
* lz4: an LZ4 frame as KafkaLZ4BlockOutputStream writes it: independent 64 KiB
  blocks, no block or content checksum, no content size.  Magic-0 messages were
  written with a header checksum computed over the frame magic too; we repair that
  byte before decoding, because the LZ4 library insists on the standard one;
* zstd: standard zstd frames, decoded by streaming so frames without a content
  size (Kafka's zstd-jni writes none) are fine.

Decoding failures of any kind surface as ``CorruptRecordError``; an id outside 0..4 is
``UnsupportedCompressionTypeError``.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from tierlog.storage.errors import (
    CorruptRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)
from tierlog.storage.records.buffers import ReadableBuffer

__all__ = [
    "GZIP_LEVEL",
    "ZSTD_LEVEL",
    "CompressionType",
    "compress",
    "compression_type",
    "decompress",
    "xxh32",
]


class CompressionType(IntEnum):
    """The codec id in bits 0-2 of a batch's (or legacy message's) attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_BY_ID: tuple[CompressionType, ...] = tuple(CompressionType)

GZIP_LEVEL = 6  # java.util.zip.Deflater's default, what Kafka's gzip uses
ZSTD_LEVEL = 3  # zstd's and Kafka's default

_SNAPPY_MAGIC = b"\x82SNAPPY\x00"
_SNAPPY_HEADER = _SNAPPY_MAGIC + struct.pack(">ii", 1, 1)
_SNAPPY_BLOCK = 32 * 1024  # xerial SnappyOutputStream's default block size
_INT32_BE = struct.Struct(">i")

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_FLG_DICT_ID = 0x01


def compression_type(codec_id: int) -> CompressionType:
    """The codec for ``codec_id``, or ``UnsupportedCompressionTypeError``."""
    if 0 <= codec_id < len(_BY_ID):
        return _BY_ID[codec_id]
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec_id}")


def compress(ctype: int, data: ReadableBuffer, *, magic: int = 2) -> bytes:
    """``data`` compressed in Kafka's framing for ``ctype``.

    ``magic`` matters only for lz4: magic 0 gets the old, broken header checksum,
    as Kafka writes it for magic-0 wrappers.
    """
    codec = compression_type(ctype)
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.GZIP:
        gz = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
        return gz.compress(data) + gz.flush()
    if codec is CompressionType.SNAPPY:
        return _snappy_compress(memoryview(data))
    if codec is CompressionType.LZ4:
        return _lz4_compress(data, magic)
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(memoryview(data))


def decompress(
    ctype: int, data: ReadableBuffer, *, magic: int = 2, max_bytes: int | None = None
) -> bytes:
    """The bytes ``data`` decodes to under ``ctype``; ``CorruptRecordError`` if it cannot.

    ``max_bytes`` bounds the output: a stream that decodes to more raises
    ``RecordTooLargeError`` having held little more than that in memory.  A broker
    decoding what a producer sent needs it: a megabyte of zstd can hold 32 GiB of zeros.
    """
    codec = compression_type(ctype)
    if codec is CompressionType.NONE:
        return bytes(data)
    limit = _NO_LIMIT if max_bytes is None else max_bytes
    try:
        if codec is CompressionType.GZIP:
            return _gzip_decompress(data, limit)
        if codec is CompressionType.SNAPPY:
            return _snappy_decompress(memoryview(data), limit)
        if codec is CompressionType.LZ4:
            return _lz4_decompress(data, magic, limit)
        return _zstd_decompress(data, limit)
    except (CorruptRecordError, RecordTooLargeError):
        raise
    except Exception as exc:  # every codec library has its own error types
        raise CorruptRecordError(f"cannot decompress {codec.name} data: {exc}") from exc


_NO_LIMIT = 2**62


def _too_large(limit: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"compressed records decode to more than {limit} bytes")


# -- gzip --------------------------------------------------------------------------


def _gzip_decompress(data: ReadableBuffer, limit: int) -> bytes:
    parts: list[bytes] = []
    rest: ReadableBuffer = data
    room = limit
    while True:
        inflater = zlib.decompressobj(31)
        # One byte past the room: reaching it means the stream holds more than allowed.
        parts.append(
            inflater.decompress(rest, room + 1) if limit < _NO_LIMIT else inflater.decompress(rest)
        )
        room -= len(parts[-1])
        if room < 0:
            raise _too_large(limit)
        if not inflater.eof:
            raise CorruptRecordError("gzip stream is truncated")
        rest = inflater.unused_data
        # Like java.util.zip.GZIPInputStream, read on only into another gzip member.
        if not rest.startswith(b"\x1f\x8b"):
            return parts[0] if len(parts) == 1 else b"".join(parts)


# -- snappy (xerial framing) -------------------------------------------------------


def _snappy_compress(view: memoryview) -> bytes:
    parts: list[bytes] = [_SNAPPY_HEADER]
    for start in range(0, len(view), _SNAPPY_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _SNAPPY_BLOCK]))
        parts.append(_INT32_BE.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw(block: memoryview, room: int, limit: int) -> bytes:
    # A raw block begins with its decoded length: checked before anything is allocated.
    if cramjam.snappy.decompress_raw_len(block) > room:
        raise _too_large(limit)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(view: memoryview, limit: int) -> bytes:
    if view[:8] != _SNAPPY_MAGIC:
        return _snappy_raw(view, limit, limit)
    if len(view) < len(_SNAPPY_HEADER):
        raise CorruptRecordError("snappy stream header is truncated")
    out = bytearray()
    pos, end = len(_SNAPPY_HEADER), len(view)
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("snappy chunk length is truncated")
        (length,) = _INT32_BE.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptRecordError(f"snappy chunk of {length} bytes overruns the stream")
        out += _snappy_raw(view[pos : pos + length], limit - len(out), limit)
        pos += length
    return bytes(out)


# -- lz4 (Kafka's frame) -----------------------------------------------------------


def _lz4_compress(data: ReadableBuffer, magic: int) -> bytes:
    frame = lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )
    if magic != 0:
        return bytes(frame)
    # Kafka's magic-0 writer hashes magic + FLG + BD; the header is 7 bytes here.
    fixed = bytearray(frame)
    fixed[6] = (xxh32(fixed[0:6]) >> 8) & 0xFF
    return bytes(fixed)


# LZ4's densest sequence adds 255 bytes of match for each byte of length: no frame decodes
# to more than 255 times its size (plus a few bytes).
_LZ4_MAX_RATIO = 256


def _lz4_header_end(data: ReadableBuffer) -> int:
    """Index of the header-checksum byte of the LZ4 frame at the start of ``data``."""
    if len(data) < 7 or bytes(data[0:4]) != _LZ4_MAGIC:
        raise CorruptRecordError("not an LZ4 frame: bad magic or too short")
    flg = data[4]
    end = 6
    if flg & _LZ4_FLG_CONTENT_SIZE:
        end += 8
    if flg & _LZ4_FLG_DICT_ID:
        end += 4
    if len(data) <= end:
        raise CorruptRecordError("LZ4 frame header is truncated")
    return end


def _lz4_decompress(data: ReadableBuffer, magic: int, limit: int) -> bytes:
    if magic == 0:
        hc = _lz4_header_end(data)
        descriptor = bytes(data[4:hc])
        correct = (xxh32(descriptor) >> 8) & 0xFF
        if data[hc] != correct and data[hc] == (xxh32(_LZ4_MAGIC + descriptor) >> 8) & 0xFF:
            fixed = bytearray(data)
            fixed[hc] = correct
            data = fixed
    if len(data) * _LZ4_MAX_RATIO <= limit:
        return bytes(lz4.frame.decompress(data))
    # The first frame, as lz4.frame.decompress reads it, but never past the limit (a
    # decompressor asked for a bounded output sets that much aside: the slow path).
    decompressor = lz4.frame.LZ4FrameDecompressor()
    result = decompressor.decompress(data, max_length=limit + 1)
    if len(result) > limit:
        raise _too_large(limit)
    if not decompressor.eof:
        raise CorruptRecordError("LZ4 frame is truncated")
    return bytes(result)


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M32, 13) * _P1) & _M32


def xxh32(data: bytes | bytearray, seed: int = 0) -> int:
    """XXH32 of ``data``; pure Python, meant for the few bytes of an LZ4 frame header."""
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while pos + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, pos)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            pos += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h = ((h ^ (h >> 15)) * _P2) & _M32
    h = ((h ^ (h >> 13)) * _P3) & _M32
    return h ^ (h >> 16)


# -- zstd --------------------------------------------------------------------------


# zstd's densest block (RLE: a 3-byte header and the byte) decodes to 128 KiB: one input
# byte to at most 2**15 out.  Fed in steps of room >> 15 bytes, a stream overshoots its
# limit by at most one small step's worth before it is refused.
_ZSTD_MAX_RATIO_SHIFT = 15
_ZSTD_MIN_STEP = 64


def _zstd_decompress(data: ReadableBuffer, limit: int) -> bytes:
    parts: list[bytes] = []
    rest: bytes | memoryview = memoryview(data)
    decompressor = zstandard.ZstdDecompressor()
    room = limit
    while True:
        stream = decompressor.decompressobj()
        pos = 0
        while pos < len(rest) and not stream.eof:
            step = (
                len(rest)
                if limit == _NO_LIMIT
                else max(_ZSTD_MIN_STEP, room >> _ZSTD_MAX_RATIO_SHIFT)
            )
            parts.append(stream.decompress(rest[pos : pos + step]))
            pos += step
            room -= len(parts[-1])
            if room < 0:
                raise _too_large(limit)
        if not stream.eof:
            raise CorruptRecordError("zstd stream is truncated")
        rest = b"".join((stream.unused_data, rest[pos:]))
        if not rest:
            return parts[0] if len(parts) == 1 else b"".join(parts)
