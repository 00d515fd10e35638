from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.storage.tier.test_manifest import TP, remote_segment
from tierlog.storage.tier.layout import new_segment_id, segment_key
from tierlog.storage.tier.manifest import (
    ByteRange,
    ChunkRef,
    CorruptManifestError,
    PartitionManifest,
    RemoteSegment,
    SegmentPart,
    SegmentState,
    part_ranges,
)
from tierlog.storage.tier.manifest_codec import (
    decode_chunk,
    decode_manifest,
    encode_chunk,
    encode_manifest,
)
from tierlog.storage.topic_partition import TopicPartition

part_lengths = st.fixed_dictionaries({part: st.integers(0, 2**40) for part in SegmentPart})


@st.composite
def segments(draw: st.DrawFn) -> RemoteSegment:
    base = draw(st.integers(0, 2**62))
    segment_id = new_segment_id()
    epoch = draw(st.integers(0, 2**31))
    return RemoteSegment(
        segment_id=segment_id,
        writer_epoch=epoch,
        state=draw(st.sampled_from(SegmentState)),
        base_offset=base,
        end_offset=base + draw(st.integers(1, 2**31)),
        base_timestamp=draw(st.integers(-1, 2**62)),
        max_timestamp=draw(st.integers(-1, 2**62)),
        offset_of_max_timestamp=base,
        key=segment_key(TP, base, epoch, segment_id),
        parts=part_ranges(draw(part_lengths)),
        created_ms=draw(st.integers(0, 2**62)),
    )


refs = st.builds(
    ChunkRef,
    key=st.text("abc/-.", min_size=1, max_size=30),
    level=st.integers(1, 5),
    base_offset=st.integers(0, 2**40),
    end_offset=st.integers(2**40 + 1, 2**62),
    segment_count=st.integers(1, 2**20),
    log_size_bytes=st.integers(0, 2**50),
    max_timestamp=st.integers(-1, 2**62),
    retention_timestamp=st.integers(-1, 2**62),
)

manifests = st.builds(
    PartitionManifest,
    tp=st.builds(TopicPartition, st.text("ab._-", min_size=1, max_size=20), st.integers(0, 99)),
    version=st.integers(0, 2**62),
    writer_epoch=st.integers(0, 2**31),
    writer_id=st.text(max_size=40),
    log_start_offset=st.integers(0, 2**62),
    deleted_end_offset=st.integers(0, 2**62),
    chunks=st.lists(refs, max_size=4).map(tuple),
    segments=st.lists(segments(), max_size=6).map(tuple),
).map(lambda manifest: manifest.with_segments(manifest.segments))  # the order a head keeps


@given(manifests)
def test_encoding_round_trips(manifest: PartitionManifest) -> None:
    assert decode_manifest(encode_manifest(manifest)) == manifest


@given(manifests)
def test_encoding_is_deterministic(manifest: PartitionManifest) -> None:
    assert encode_manifest(decode_manifest(encode_manifest(manifest))) == encode_manifest(manifest)


@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b"[]", b'{"format": 2}', b'{"format": 1}', b'{"format": 1, "topic": 3}'],
)
def test_anything_else_is_a_corrupt_manifest(data: bytes) -> None:
    with pytest.raises(CorruptManifestError):
        decode_manifest(data)


def test_a_segment_with_broken_ranges_does_not_decode() -> None:
    manifest = PartitionManifest(TP, segments=(remote_segment(0, 10),))
    text = encode_manifest(manifest).replace(b'"offset_index":[100,', b'"offset_index":[99,')
    with pytest.raises(CorruptManifestError):
        decode_manifest(text)


def test_a_format_1_manifest_reads_its_deleting_entries_as_dead() -> None:
    gone, kept = remote_segment(0, 10), remote_segment(10, 20, state=SegmentState.FINISHED)
    document = json.loads(encode_manifest(PartitionManifest(TP, segments=(gone, kept))))
    document.update(format=1, log_start_offset=4)
    del document["chunks"], document["deleted_end_offset"]
    document["segments"][0]["state"] = "deleting"
    manifest = decode_manifest(json.dumps(document).encode())
    assert manifest.log_start_offset == 10  # where format 1 had put the deleting entry
    assert [s.state for s in manifest.segments] == [SegmentState.FINISHED] * 2
    assert (manifest.deleted_end_offset, manifest.chunks) == (0, ())
    assert [s.base_offset for s in manifest.view().all_segments()] == [10]


@pytest.mark.parametrize("format_version", [1, 2])
def test_a_head_written_in_base_offset_order_reads_in_end_offset_order(
    format_version: int,
) -> None:
    longer = remote_segment(6, 9, state=SegmentState.FINISHED)  # started first, finished last
    shorter = remote_segment(6, 8, state=SegmentState.FINISHED)
    document = json.loads(encode_manifest(PartitionManifest(TP, segments=(longer, shorter))))
    document["format"] = format_version
    manifest = decode_manifest(json.dumps(document).encode())
    assert manifest.segments == (shorter, longer)
    assert manifest.view().segment_for_offset(8) == longer


@pytest.mark.parametrize("format_version", [1, 2])
def test_an_entry_written_before_the_txn_index_part_reads_as_an_empty_one(
    format_version: int,
) -> None:
    segment = remote_segment(0, 10, state=SegmentState.FINISHED)
    document = json.loads(encode_manifest(PartitionManifest(TP, segments=(segment,))))
    end = segment.object_size_bytes
    assert document["segments"][0]["parts"].pop("txn_index") == [end, end]
    if format_version == 1:
        document["format"] = 1
        del document["chunks"], document["deleted_end_offset"]
    (decoded,) = decode_manifest(json.dumps(document).encode()).segments
    assert decoded == segment
    assert decoded.range_of(SegmentPart.TXN_INDEX) == ByteRange(end, end)


def test_a_chunk_round_trips_and_must_match_its_reference() -> None:
    entries = [remote_segment(b, b + 5, state=SegmentState.FINISHED) for b in (0, 5)]
    body = encode_chunk(TP, 1, entries)
    ref = ChunkRef("k", 1, 0, 10, 2, 200, 1000, 1000)
    assert decode_chunk(body, ref) == tuple(entries)
    for lie in (
        ChunkRef("k", 2, 0, 10, 2, 200, 1000, 1000),  # another level
        ChunkRef("k", 1, 0, 11, 2, 200, 1000, 1000),  # another end
        ChunkRef("k", 1, 0, 10, 3, 200, 1000, 1000),  # another count
    ):
        with pytest.raises(CorruptManifestError):
            decode_chunk(body, lie)
    started = encode_chunk(TP, 1, [remote_segment(0, 10)])
    with pytest.raises(CorruptManifestError):  # a chunk holds finished segments only
        decode_chunk(started, ChunkRef("k", 1, 0, 10, 1, 100, 1000, 1000))
