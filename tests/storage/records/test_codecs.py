"""Compression codecs in Kafka's framing: what Kafka's readers accept and writers emit."""

from __future__ import annotations

import gzip
import os
import struct

import cramjam
import lz4.block
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.storage.errors import (
    CorruptRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)
from tierlog.storage.records.codecs import (
    CompressionType,
    compress,
    compression_type,
    decompress,
    xxh32,
)

CODECS = list(CompressionType)
MIXED = (os.urandom(200_000) + b"tierlog " * 60_000)[: 1 << 20]  # 1 MiB, half compressible


@settings(max_examples=40)
@given(st.sampled_from(CODECS), st.binary(max_size=5000), st.sampled_from([0, 1, 2]))
def test_every_codec_round_trips(codec: CompressionType, data: bytes, magic: int) -> None:
    assert decompress(codec, compress(codec, data, magic=magic), magic=magic) == data


@pytest.mark.parametrize("codec", CODECS)
def test_one_mebibyte_payload_round_trips(codec: CompressionType) -> None:
    assert decompress(codec, memoryview(compress(codec, MIXED))) == MIXED


def test_unknown_codec_ids_are_unsupported() -> None:
    assert compression_type(4) is CompressionType.ZSTD
    for codec_id in (5, 6, 7, -1):
        with pytest.raises(UnsupportedCompressionTypeError):
            compress(codec_id, b"x")
        with pytest.raises(UnsupportedCompressionTypeError):
            decompress(codec_id, b"x")


@pytest.mark.parametrize("codec", CODECS[1:])
@pytest.mark.parametrize("garbage", [b"", b"\x00", b"not a compressed stream at all"])
def test_garbage_is_corrupt(codec: CompressionType, garbage: bytes) -> None:
    if codec is CompressionType.SNAPPY and garbage == b"\x00":
        # A lone zero byte is a valid raw snappy block: the empty payload.
        assert decompress(codec, garbage) == b""
        return
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_truncated_streams_are_corrupt(codec: CompressionType) -> None:
    data = compress(codec, MIXED)
    with pytest.raises(CorruptRecordError):
        decompress(codec, data[: len(data) // 2])


# -- gzip --------------------------------------------------------------------------


def test_gzip_is_a_plain_gzip_stream() -> None:
    assert gzip.decompress(compress(CompressionType.GZIP, b"hello")) == b"hello"
    assert decompress(CompressionType.GZIP, gzip.compress(b"hello")) == b"hello"


def test_gzip_reads_concatenated_members() -> None:
    data = gzip.compress(b"hello ") + gzip.compress(b"world")
    assert decompress(CompressionType.GZIP, data) == b"hello world"


# -- snappy --------------------------------------------------------------------------


def test_snappy_uses_xerial_framing_with_32k_chunks() -> None:
    data = bytes(range(256)) * 400  # 100 KiB: three full 32 KiB chunks and a tail
    framed = compress(CompressionType.SNAPPY, data)
    assert framed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, chunks = 16, []
    while pos < len(framed):
        (length,) = struct.unpack_from(">i", framed, pos)
        chunks.append(bytes(cramjam.snappy.decompress_raw(framed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert [len(c) for c in chunks] == [32768, 32768, 32768, 4096]
    assert b"".join(chunks) == data


def test_snappy_also_reads_a_bare_raw_block() -> None:
    raw = bytes(cramjam.snappy.compress_raw(b"raw snappy" * 10))
    assert decompress(CompressionType.SNAPPY, raw) == b"raw snappy" * 10


def test_snappy_chunk_overrunning_the_stream_is_corrupt() -> None:
    framed = bytearray(compress(CompressionType.SNAPPY, b"abc" * 100))
    struct.pack_into(">i", framed, 16, 10_000)
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.SNAPPY, framed)


# -- lz4 ---------------------------------------------------------------------------


def test_xxh32_vectors() -> None:
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_lz4_frame_header_matches_kafkas_writer() -> None:
    frame = compress(CompressionType.LZ4, b"payload")
    # magic, FLG = version 1 + independent blocks, BD = 64 KiB, header checksum
    assert frame[:7].hex() == "04224d18604082"
    assert frame[-4:] == b"\x00\x00\x00\x00"  # end mark, no content checksum


def test_lz4_blocks_are_independent_and_at_most_64k() -> None:
    frame = compress(CompressionType.LZ4, MIXED)
    pos, out = 7, bytearray()
    while True:
        (word,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if word == 0:
            break
        length, stored = word & 0x7FFFFFFF, bool(word & 0x80000000)
        block = frame[pos : pos + length]
        # Each block decodes on its own: no block refers back to an earlier one.
        piece = block if stored else lz4.block.decompress(block, uncompressed_size=65536)
        assert len(piece) <= 65536
        out += piece
        pos += length
    assert pos == len(frame)
    assert bytes(out) == MIXED


def test_lz4_magic_0_writes_the_broken_header_checksum() -> None:
    frame = compress(CompressionType.LZ4, b"old client", magic=0)
    # Kafka's old writer hashed the frame magic too: xxh32(magic+FLG+BD) >> 8.
    assert frame[6] == (xxh32(frame[0:6]) >> 8) & 0xFF == 0x1A
    assert decompress(CompressionType.LZ4, frame, magic=0) == b"old client"


def test_lz4_broken_checksum_is_accepted_only_for_magic_0() -> None:
    broken = compress(CompressionType.LZ4, b"old client", magic=0)
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.LZ4, broken, magic=1)
    correct = compress(CompressionType.LZ4, b"new client", magic=1)
    assert decompress(CompressionType.LZ4, correct, magic=0) == b"new client"


def test_lz4_reads_standard_frames_with_checksums_and_sizes() -> None:
    frame = lz4.frame.compress(b"abc" * 50_000, content_checksum=True, store_size=True)
    assert decompress(CompressionType.LZ4, frame) == b"abc" * 50_000


# -- zstd --------------------------------------------------------------------------


def test_zstd_reads_frames_without_content_size() -> None:
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(MIXED)
    assert decompress(CompressionType.ZSTD, frame) == MIXED


def test_zstd_reads_a_streamed_frame_and_concatenated_frames() -> None:
    streamed = zstandard.ZstdCompressor().compressobj()
    frame = streamed.compress(b"first ") + streamed.flush()
    second = zstandard.ZstdCompressor().compress(b"second")
    assert decompress(CompressionType.ZSTD, frame + second) == b"first second"


_COMPRESSED = [c for c in CompressionType if c is not CompressionType.NONE]


@pytest.mark.parametrize("codec", _COMPRESSED, ids=lambda codec: codec.name)
def test_max_bytes_bounds_what_a_stream_may_decode_to(codec: CompressionType) -> None:
    data = os.urandom(1000) + bytes(200_000)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_bytes=len(data)) == data  # exactly at the bound
    with pytest.raises(RecordTooLargeError):
        decompress(codec, packed, max_bytes=len(data) - 1)


@pytest.mark.parametrize("codec", _COMPRESSED, ids=lambda codec: codec.name)
def test_a_bounded_decompress_still_refuses_a_truncated_stream(codec: CompressionType) -> None:
    packed = compress(codec, os.urandom(5000) * 4)
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed[: len(packed) // 2], max_bytes=10**6)


def test_a_zstd_bomb_is_refused_before_it_is_decoded() -> None:
    # 256 MiB of zeros in a few KiB: refused having decoded little more than the bound.
    bomb = zstandard.ZstdCompressor().compress(bytes(256 * 1024 * 1024))
    assert len(bomb) < 16 * 1024
    with pytest.raises(RecordTooLargeError):
        decompress(CompressionType.ZSTD, bomb, max_bytes=1024 * 1024)


def test_bounded_zstd_reads_frames_back_to_back() -> None:
    frames = compress(CompressionType.ZSTD, b"first " * 1000) + compress(
        CompressionType.ZSTD, b"second" * 1000
    )
    assert decompress(CompressionType.ZSTD, frames, max_bytes=12_000) == (
        b"first " * 1000 + b"second" * 1000
    )
    with pytest.raises(RecordTooLargeError):
        decompress(CompressionType.ZSTD, frames, max_bytes=11_999)


def test_bounded_zstd_refuses_a_stream_cut_anywhere_but_between_frames() -> None:
    # The chunked reader ends quietly where its input does: the frames' block headers
    # tell a cut frame (CORRUPT_MESSAGE) from a whole one.
    first = zstandard.ZstdCompressor(write_checksum=True).compress(os.urandom(3000) * 30)
    second = zstandard.ZstdCompressor(write_content_size=False).compress(b"second" * 500)
    stream = first + second
    for cut in range(1, len(stream)):
        if cut == len(first):
            assert decompress(CompressionType.ZSTD, stream[:cut], max_bytes=10**6)
            continue
        with pytest.raises(CorruptRecordError):
            decompress(CompressionType.ZSTD, stream[:cut], max_bytes=10**6)


def test_zstd_skippable_frames_are_skipped_bounded_or_not() -> None:
    skippable = struct.pack("<II", 0x184D2A5E, 3) + b"abc"
    frame = compress(CompressionType.ZSTD, b"hello")
    for stream in (skippable + frame, frame + skippable):
        assert decompress(CompressionType.ZSTD, stream) == b"hello"
        assert decompress(CompressionType.ZSTD, stream, max_bytes=5) == b"hello"
