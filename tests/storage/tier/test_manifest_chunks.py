"""Chunked manifests against the flat model: the same changes applied to a head that
never seals (the format before chunks) and to one sealed after each change, as the
writer does, must show readers the same tier."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.storage.tier.manifests import Chunks, upload
from tests.storage.tier.test_manifest import TP, remote_segment
from tierlog.storage.tier.manifest import (
    ChunkRef,
    ManifestChange,
    ManifestStateError,
    PartitionManifest,
    RemoteLogView,
    RemoteSegment,
    SegmentState,
)
from tierlog.storage.tier.manifest_chunks import (
    Swap,
    dead_objects,
    names_segment,
    referenced_chunks,
    replace_segments,
    seal,
)
from tierlog.storage.tier.manifest_codec import decode_manifest, encode_manifest

operations = st.lists(
    st.one_of(
        st.tuples(st.just("upload"), st.integers(1, 9), st.integers(0, 500), st.booleans()),
        st.tuples(st.just("start"), st.integers(1, 9)),
        st.tuples(st.just("finish")),
        st.tuples(st.just("drop")),
        st.tuples(st.just("log start"), st.integers(0, 40)),
        st.tuples(st.just("delete")),
    ),
    max_size=120,
)


class Tier:
    """One manifest and its chunks; ``deleted`` are the object keys deletion removed."""

    def __init__(self, chunk_entries: int | None):
        self.chunk_entries = chunk_entries
        self.manifest = PartitionManifest(TP)
        self.chunks = Chunks()
        self.deleted: set[str] = set()

    def apply(self, change: ManifestChange) -> None:
        self.manifest = self.chunks.apply(self.manifest, change, self.chunk_entries)

    def delete_dead(self) -> None:
        dead = dead_objects(self.manifest, self.chunks)
        self.deleted.update(segment.key for segment in dead.segments)
        for key in dead.chunk_keys:
            del self.chunks.bodies[key]  # gone: no later lookup may need it
        upto = self.manifest.log_start_offset
        self.apply(lambda m: m.forget_deleted(upto))

    @property
    def view(self) -> RemoteLogView:
        return self.manifest.view(self.chunks)


def run(tiers: list[Tier], ops: list[tuple[object, ...]]) -> Iterator[None]:
    """Apply each operation to every tier; yields after each one."""
    pending: list[RemoteSegment] = []
    timestamp = 1000
    for op in ops:
        flat = tiers[0].manifest
        end = flat.uploaded_end_offset
        if op[0] == "upload":
            _, length, size, straddle = op
            assert isinstance(length, int) and isinstance(size, int)
            base = max(end - 1, 0) if straddle else end
            timestamp += size % 7
            segment = remote_segment(
                base, base + length + 1, state=SegmentState.FINISHED, log_bytes=size,
                max_timestamp=timestamp - 3 * (size % 2),
            )  # fmt: skip
            change: ManifestChange = lambda m, s=segment: upload(m, s)  # type: ignore[misc]  # noqa: E731
        elif op[0] == "start":
            segment = remote_segment(end, end + int(str(op[1])))
            pending.append(segment)
            change = lambda m, s=segment: m.start_upload(s)  # type: ignore[misc]  # noqa: E731
        elif op[0] == "finish" and pending:
            segment = pending.pop(0)
            if segment.end_offset <= end:
                continue  # it adds nothing any more: the writer would drop it
            change = lambda m, s=segment: m.finish_upload(s.segment_id)  # type: ignore[misc]  # noqa: E731
        elif op[0] == "drop" and pending:
            segment = pending.pop()
            change = lambda m, s=segment: m.drop([s.segment_id])  # type: ignore[misc]  # noqa: E731
        elif op[0] == "log start":
            start = flat.log_start_offset + int(str(op[1]))
            change = lambda m, s=start: m.advance_log_start(s)  # type: ignore[misc]  # noqa: E731
        elif op[0] == "delete":
            for tier in tiers:
                tier.delete_dead()
            yield
            continue
        else:
            continue
        for tier in tiers:
            tier.apply(change)
        yield


def check_same_view(flat: Tier, chunked: Tier) -> None:
    expected, found = flat.view, chunked.view
    assert (found.log_start_offset, found.end_offset) == (
        expected.log_start_offset,
        expected.end_offset,
    )
    assert found.all_segments() == expected.all_segments()
    for offset in range(max(0, expected.log_start_offset - 2), expected.end_offset + 2):
        segment = found.segment_for_offset(offset)
        assert segment == expected.segment_for_offset(offset)
        # The flat view is no oracle: both could skip an offset. ``run`` leaves no gaps,
        # so every offset in the tier has a segment holding it.
        in_tier = expected.log_start_offset <= offset < expected.end_offset
        assert (segment is not None and segment.holds(offset)) == in_tier
    for timestamp in range(990, 1000 + 7 * 120, 37):
        assert found.segment_for_timestamp(timestamp) == expected.segment_for_timestamp(timestamp)
    assert found.segment_with_max_timestamp() == expected.segment_with_max_timestamp()
    assert found.last_segment() == expected.last_segment()
    assert chunked.manifest.uploaded_end_offset == flat.manifest.uploaded_end_offset
    assert chunked.deleted == flat.deleted


def check_head_is_bounded(tier: Tier) -> None:
    manifest, bound = tier.manifest, 2 * (tier.chunk_entries or 0)
    finished = manifest.in_state(SegmentState.FINISHED)
    live = [s for s in finished if s.end_offset > manifest.log_start_offset]
    assert len(live) < bound
    for level in {ref.level for ref in manifest.chunks}:
        same = [r for r in manifest.chunks if r.level == level]
        assert len([r for r in same if r.end_offset > manifest.log_start_offset]) < bound
    assert decode_manifest(encode_manifest(manifest)) == manifest


def check_chunk_bookkeeping(tier: Tier) -> None:
    """Every chunk kept is reached from the head, and only those."""
    assert referenced_chunks(tier.manifest, tier.chunks) == set(tier.chunks.bodies)
    for segment in tier.view.all_segments():
        assert names_segment(tier.manifest, tier.chunks, segment.key)
    for key in tier.deleted:
        assert not names_segment(tier.manifest, tier.chunks, key)


@settings(max_examples=200, deadline=None)
@given(ops=operations, chunk_entries=st.integers(2, 4))
# [6, 9), started at the tier's end, finishes after [6, 8): in base offset order the
# segment id broke the tie, and the flat view lost offset 8 while the chunked one had it.
@example(
    ops=[*[("upload", 1, 0, False)] * 3, ("start", 3), ("upload", 1, 0, False), ("finish",)],
    chunk_entries=2,
)
def test_a_chunked_manifest_shows_what_the_flat_one_shows(
    ops: list[tuple[object, ...]], chunk_entries: int
) -> None:
    flat, chunked = Tier(None), Tier(chunk_entries)
    for _ in run([flat, chunked], ops):
        check_same_view(flat, chunked)
        check_head_is_bounded(chunked)
        check_chunk_bookkeeping(chunked)


def test_a_lookup_reads_only_the_chunks_on_its_path() -> None:
    tier = Tier(4)
    for _ in run([tier], [("upload", 1, 10, False)] * 2000):
        pass
    levels = max(ref.level for ref in tier.manifest.chunks)
    assert levels >= 3
    for offset in (0, 1000, 3000, 3990):
        view = tier.view
        before = tier.chunks.reads
        segment = view.segment_for_offset(offset)
        assert segment is not None and segment.holds(offset)
        assert tier.chunks.reads - before <= levels
        before = tier.chunks.reads
        found = view.segment_for_timestamp(segment.max_timestamp)
        assert found is not None and found.max_timestamp >= segment.max_timestamp
        assert tier.chunks.reads - before <= levels + 1


def test_deletion_from_the_front_forgets_whole_chunks() -> None:
    tier = Tier(2)
    for _ in run([tier], [("upload", 1, 10, False)] * 40):
        pass
    chunks_before = len(tier.chunks.bodies)
    tier.apply(lambda m: m.advance_log_start(40))
    tier.delete_dead()
    assert len(tier.deleted) == 20  # each segment covers 2 offsets
    assert tier.manifest.deleted_end_offset == 40
    assert all(ref.end_offset > 40 for ref in tier.manifest.chunks)
    assert len(tier.chunks.bodies) < chunks_before
    assert [s.base_offset for s in tier.view.all_segments()][:1] == [40]


def test_a_chunk_is_named_by_its_bytes_so_sealing_again_is_harmless() -> None:
    manifest = PartitionManifest(TP)
    for base in range(0, 8, 2):
        segment = remote_segment(base, base + 2, state=SegmentState.FINISHED)
        manifest = upload(manifest, segment)
    first, chunks_a = seal(manifest, 2)
    again, chunks_b = seal(manifest, 2)
    assert first == again and chunks_a == chunks_b and len(chunks_a) == 1
    ref = chunks_a[0].ref
    assert (ref.level, ref.base_offset, ref.end_offset, ref.segment_count) == (1, 0, 4, 2)
    assert [s.base_offset for s in first.segments] == [4, 6]  # the newest stay in the head


def test_a_chunk_that_is_not_what_its_reference_says_is_corrupt() -> None:
    manifest = PartitionManifest(TP)
    for base in range(0, 8, 2):
        manifest = upload(manifest, remote_segment(base, base + 2, state=SegmentState.FINISHED))
    _head, (chunk,) = seal(manifest, 2)
    chunks = Chunks()
    chunks.bodies[chunk.ref.key] = chunk.body
    lying = dataclasses.replace(chunk.ref, end_offset=6)
    from tierlog.storage.tier.manifest import CorruptManifestError

    with pytest.raises(CorruptManifestError):
        chunks(lying)
    assert isinstance(chunks(chunk.ref)[0], RemoteSegment)
    assert not isinstance(chunks(chunk.ref)[0], ChunkRef)


def tier_of(count: int, chunk_entries: int) -> Tier:
    """A tier of ``count`` finished 10-offset segments, sealed into chunks."""
    tier = Tier(chunk_entries)
    for base in range(0, 10 * count, 10):
        segment = remote_segment(base, base + 10, state=SegmentState.FINISHED)
        tier.apply(lambda m, s=segment: upload(m, s))  # type: ignore[misc]
    return tier


def test_swaps_replace_runs_that_start_and_end_inside_chunks() -> None:
    tier = tier_of(12, chunk_entries=2)
    assert tier.manifest.chunks  # the runs below cross chunk boundaries
    before = tier.view.all_segments()
    swaps = [  # two runs, with a segment the cleaning left alone between them
        Swap(before[3:6], remote_segment(30, 60, state=SegmentState.FINISHED)),
        Swap(before[7:9], remote_segment(70, 90, state=SegmentState.FINISHED)),
    ]
    tier.apply(lambda m: replace_segments(m, tier.chunks, swaps, 90))
    after = tier.view.all_segments()
    assert [(s.base_offset, s.end_offset) for s in after] == [
        (0, 10), (10, 20), (20, 30), (30, 60), (60, 70), (70, 90), (90, 100), (100, 110),
        (110, 120),
    ]  # fmt: skip
    kept = before[:3] + before[6:7] + before[9:]
    assert {s.key for s in after} == {s.key for s in [*kept, *(swap.cleaned for swap in swaps)]}
    assert tier.manifest.cleaner_offset == 90
    assert tier.manifest.chunks  # sealed again
    assert decode_manifest(encode_manifest(tier.manifest)) == tier.manifest


def test_a_swap_of_a_run_that_changed_meanwhile_is_refused() -> None:
    tier = tier_of(6, chunk_entries=2)
    run = tier.view.all_segments()[:3]
    tier.apply(lambda m: m.advance_log_start(10))
    tier.delete_dead()  # retention took the run's first segment since it was read
    cleaned = remote_segment(0, 30, state=SegmentState.FINISHED)
    with pytest.raises(ManifestStateError, match="changed"):
        replace_segments(tier.manifest, tier.chunks, [Swap(run, cleaned)], 30)
    short = remote_segment(10, 20, state=SegmentState.FINISHED)
    with pytest.raises(ManifestStateError, match="cover"):
        replace_segments(tier.manifest, tier.chunks, [Swap(run[1:], short)], 30)


def test_a_swap_accepts_a_cleaned_run_that_starts_where_an_overlapping_upload_is_new() -> None:
    """An upload that straddled the tier's end overlaps the segment before it; the tier
    cleaner reads only its new offsets, so its cleaned segment starts above its base."""
    tier = tier_of(2, chunk_entries=2)
    straddling = remote_segment(15, 30, state=SegmentState.FINISHED)
    tier.apply(lambda m: upload(m, straddling))
    cleaned = remote_segment(20, 30, state=SegmentState.FINISHED)
    tier.apply(lambda m: replace_segments(m, tier.chunks, [Swap((straddling,), cleaned)], 30))
    assert [(s.base_offset, s.end_offset) for s in tier.view.all_segments()] == [
        (0, 10), (10, 20), (20, 30),
    ]  # fmt: skip
