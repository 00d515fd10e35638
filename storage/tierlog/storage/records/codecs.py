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

``decompress_chunks`` decodes any of them incrementally, in pieces of a bounded size,
so a broker can walk what a producer sent without ever holding the whole decoded
section: a megabyte of zstd can hold 32 GiB of zeros.  Decoding failures of any kind
surface as ``CorruptRecordError``; an id outside 0..4 is
``UnsupportedCompressionTypeError``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Generator, Iterator
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
    "decoder_window_bytes",
    "decompress",
    "decompress_chunks",
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
    ``RecordTooLargeError`` having held little more than that in memory (it is decoded
    by ``decompress_chunks``).
    """
    codec = compression_type(ctype)
    if codec is CompressionType.NONE:
        return bytes(data)
    if max_bytes is not None:
        return b"".join(
            decompress_chunks(codec, data, magic=magic, max_bytes=max_bytes, chunk_bytes=_MiB)
        )
    try:
        if codec is CompressionType.GZIP:
            return _gzip_decompress(data)
        if codec is CompressionType.SNAPPY:
            return b"".join(_snappy_blocks(memoryview(data), _NO_LIMIT))
        if codec is CompressionType.LZ4:
            return bytes(lz4.frame.decompress(_lz4_frame(data, magic)))
        return _zstd_decompress(data)
    except CorruptRecordError:
        raise
    except Exception as exc:  # every codec library has its own error types
        raise CorruptRecordError(f"cannot decompress {codec.name} data: {exc}") from exc


def decompress_chunks(
    ctype: int, data: ReadableBuffer, *, max_bytes: int, chunk_bytes: int, magic: int = 2
) -> Generator[bytes, None, None]:
    """The bytes ``data`` decodes to under ``ctype`` (compressed), in order, in pieces of
    at most ``chunk_bytes`` (a snappy block comes whole, as xerial reads it, its size
    checked before it is decoded; an LZ4 frame whose blocks cannot hold more than two
    chunks too).  Nothing else of the output is held here.

    ``RecordTooLargeError`` as soon as the output passes ``max_bytes`` (or a frame
    declares that it would); ``CorruptRecordError`` where the stream does not decode.
    """
    codec = compression_type(ctype)
    pieces = _CHUNKERS[codec](data, chunk_bytes, max_bytes, magic)
    decoded_bytes = 0
    try:
        for piece in pieces:
            decoded_bytes += len(piece)
            if decoded_bytes > max_bytes:
                raise _too_large(max_bytes)
            yield piece
    except (CorruptRecordError, RecordTooLargeError):
        raise
    except Exception as exc:  # every codec library has its own error types
        raise CorruptRecordError(f"cannot decompress {codec.name} data: {exc}") from exc


def decoder_window_bytes(ctype: int, data: ReadableBuffer) -> int:
    """What a decoder of ``data`` sets aside besides its output: zstd's window (what the
    frame asks for, up to 128 MiB), an LZ4 block (64 KiB to 4 MiB), deflate's 32 KiB."""
    codec = compression_type(ctype)
    try:
        if codec is CompressionType.ZSTD:
            window_bytes: int = zstandard.get_frame_parameters(memoryview(data)).window_size
            return min(window_bytes, _ZSTD_MAX_WINDOW)
        if codec is CompressionType.LZ4:
            return _LZ4_BLOCK_BYTES[data[5] >> 4 & 7]
    except (zstandard.ZstdError, IndexError):
        return 0  # not a frame: decoding it fails before a window is set aside
    return _DEFLATE_WINDOW if codec is CompressionType.GZIP else 0


_ZSTD_MAX_WINDOW = 1 << 27  # zstd's default limit on what a frame may ask for
_DEFLATE_WINDOW = 32 << 10
_NO_LIMIT = 2**62
_MiB = 1024 * 1024


def _too_large(limit: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"compressed records decode to more than {limit} bytes")


# -- gzip --------------------------------------------------------------------------


def _gzip_decompress(data: ReadableBuffer) -> bytes:
    parts: list[bytes] = []
    rest: ReadableBuffer = data
    while True:
        inflater = zlib.decompressobj(31)
        parts.append(inflater.decompress(rest))
        rest = _gzip_rest(inflater)
        if not rest:
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _gzip_rest(inflater: zlib._Decompress) -> bytes:
    """What follows the gzip member ``inflater`` has read: the next member, if any."""
    if not inflater.eof:
        raise CorruptRecordError("gzip stream is truncated")
    rest = inflater.unused_data
    # Like java.util.zip.GZIPInputStream, read on only into another gzip member.
    return rest if rest.startswith(b"\x1f\x8b") else b""


def _gzip_chunks(
    data: ReadableBuffer, chunk_bytes: int, _limit: int, _magic: int
) -> Iterator[bytes]:
    rest: ReadableBuffer = data
    while True:
        inflater = zlib.decompressobj(31)
        while True:
            piece = inflater.decompress(rest, chunk_bytes)
            rest = inflater.unconsumed_tail
            if piece:
                yield piece
            elif not rest:
                break  # input spent: at its end, or truncated
        rest = _gzip_rest(inflater)
        if not rest:
            return


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


def _snappy_blocks(view: memoryview, limit: int) -> Iterator[bytes]:
    """Each block decoded, in order (a bare raw block is the one block)."""
    if view[:8] != _SNAPPY_MAGIC:
        yield _snappy_raw(view, limit, limit)
        return
    if len(view) < len(_SNAPPY_HEADER):
        raise CorruptRecordError("snappy stream header is truncated")
    room = limit
    pos, end = len(_SNAPPY_HEADER), len(view)
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("snappy chunk length is truncated")
        (length,) = _INT32_BE.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptRecordError(f"snappy chunk of {length} bytes overruns the stream")
        block = _snappy_raw(view[pos : pos + length], room, limit)
        room -= len(block)
        pos += length
        yield block


def _snappy_chunks(
    data: ReadableBuffer, _chunk_bytes: int, limit: int, _magic: int
) -> Iterator[bytes]:
    return _snappy_blocks(memoryview(data), limit)


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


def _lz4_frame(data: ReadableBuffer, magic: int) -> ReadableBuffer:
    """``data``, its header checksum repaired if a magic-0 writer computed it Kafka's way."""
    if magic != 0:
        return data
    hc = _lz4_header_end(data)
    descriptor = bytes(data[4:hc])
    correct = (xxh32(descriptor) >> 8) & 0xFF
    if data[hc] == correct or data[hc] != (xxh32(_LZ4_MAGIC + descriptor) >> 8) & 0xFF:
        return data
    fixed = bytearray(data)
    fixed[hc] = correct
    return fixed


def _lz4_chunks(data: ReadableBuffer, chunk_bytes: int, _limit: int, magic: int) -> Iterator[bytes]:
    # The first frame, as lz4.frame.decompress reads it: whole when its blocks cannot
    # hold more than two chunks (a producer's batch of batch.size 1 MiB takes a block
    # more than one), else a chunk at a time.  (A decompressor asked for at most
    # ``chunk_bytes`` sets that much aside for each piece, and that allocation cost a
    # 1 MiB batch 1 ms more than a whole decode.)
    frame = _lz4_frame(data, magic)
    if _lz4_decoded_bound(memoryview(frame)) <= 2 * chunk_bytes:
        yield bytes(lz4.frame.decompress(frame))
        return
    decompressor = lz4.frame.LZ4FrameDecompressor()
    piece = decompressor.decompress(frame, max_length=chunk_bytes)
    while piece:
        yield piece
        if decompressor.eof or decompressor.needs_input:
            break
        piece = decompressor.decompress(b"", max_length=chunk_bytes)
    if not decompressor.eof:
        raise CorruptRecordError("LZ4 frame is truncated")


_LZ4_FLG_BLOCK_CHECKSUM = 0x10
_LZ4_UNCOMPRESSED_BLOCK = 0x80000000
_LZ4_BLOCK_BYTES = (0, 0, 0, 0, 64 << 10, 256 << 10, 1 << 20, 4 << 20)  # by block max id


def _lz4_decoded_bound(view: memoryview) -> int:
    """The most the LZ4 frame at the start of ``view`` can decode to: its blocks times
    their maximum size, from the block headers (``_NO_LIMIT`` if they do not add up:
    the decoder then says what is wrong)."""
    try:
        header_end = _lz4_header_end(view)
    except CorruptRecordError:
        return _NO_LIMIT
    block_bytes = _LZ4_BLOCK_BYTES[view[5] >> 4 & 7]
    checksum_bytes = 4 if view[4] & _LZ4_FLG_BLOCK_CHECKSUM else 0
    pos, blocks = header_end + 1, 0
    while pos + 4 <= len(view):
        size = int.from_bytes(view[pos : pos + 4], "little") & ~_LZ4_UNCOMPRESSED_BLOCK
        if size == 0:  # the end mark
            return blocks * block_bytes
        pos += 4 + size + checksum_bytes
        blocks += 1
    return _NO_LIMIT


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


def _zstd_decompress(data: ReadableBuffer) -> bytes:
    parts: list[bytes] = []
    rest: bytes | memoryview = memoryview(data)
    decompressor = zstandard.ZstdDecompressor()
    while True:
        stream = decompressor.decompressobj()
        parts.append(stream.decompress(rest))
        if not stream.eof:
            raise CorruptRecordError("zstd stream is truncated")
        rest = stream.unused_data
        if not rest:
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _zstd_chunks(
    data: ReadableBuffer, chunk_bytes: int, limit: int, _magic: int
) -> Iterator[bytes]:
    # A frame may say what it decodes to (Kafka's zstd-jni writes no size; others do).
    view = memoryview(data)
    if zstandard.frame_content_size(view) > limit:
        raise _too_large(limit)
    reader = zstandard.ZstdDecompressor().stream_reader(view, read_across_frames=True)
    while piece := reader.read(chunk_bytes):
        yield piece
    # The reader ends quietly where the input does, even inside a frame.
    _check_zstd_frames_end(view)


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_SKIPPABLE_MAGIC = b"\x2a\x4d\x18"  # after a first byte of 0x50..0x5f
_ZSTD_FRAME_HEADER = struct.Struct("<4sB")
_ZSTD_CONTENT_SIZE_BYTES = (0, 2, 4, 8)  # by the descriptor's top two bits
_ZSTD_DICTIONARY_ID_BYTES = (0, 1, 2, 4)  # by its bottom two
_ZSTD_RLE_BLOCK = 1


def _check_zstd_frames_end(view: memoryview) -> None:
    """``CorruptRecordError`` unless the zstd frames in ``view`` end where it does: their
    block headers are walked, nothing is decoded."""
    pos, end = 0, len(view)
    while pos < end:
        if pos + 5 > end:
            raise CorruptRecordError("zstd frame header is truncated")
        magic, descriptor = _ZSTD_FRAME_HEADER.unpack_from(view, pos)
        skippable = magic[0] & 0xF0 == 0x50 and magic[1:] == _ZSTD_SKIPPABLE_MAGIC
        if skippable and pos + 8 <= end:  # its size, then as many bytes
            pos += 8 + int.from_bytes(view[pos + 4 : pos + 8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError("zstd stream holds bytes that are not a frame")
        single_segment = descriptor >> 5 & 1
        content_size_bytes = _ZSTD_CONTENT_SIZE_BYTES[descriptor >> 6] or single_segment
        pos += 5 + (not single_segment) + _ZSTD_DICTIONARY_ID_BYTES[descriptor & 3]
        pos += content_size_bytes
        last = False
        while not last:
            if pos + 3 > end:
                raise CorruptRecordError("zstd stream is truncated")
            block = int.from_bytes(view[pos : pos + 3], "little")
            last = bool(block & 1)
            pos += 3 + (1 if block >> 1 & 3 == _ZSTD_RLE_BLOCK else block >> 3)
        pos += 4 * (descriptor >> 2 & 1)  # the content checksum
    if pos > end:
        raise CorruptRecordError("zstd stream is truncated")


_Chunker = Callable[[ReadableBuffer, int, int, int], Iterator[bytes]]
_CHUNKERS: dict[CompressionType, _Chunker] = {
    CompressionType.GZIP: _gzip_chunks,
    CompressionType.SNAPPY: _snappy_chunks,
    CompressionType.LZ4: _lz4_chunks,
    CompressionType.ZSTD: _zstd_chunks,
}
