from __future__ import annotations

import dataclasses
import itertools

import pytest

from tierlog.storage.tier.layout import new_segment_id, segment_key
from tierlog.storage.tier.manifest import (
    ByteRange,
    ManifestStateError,
    PartitionManifest,
    RemoteSegment,
    SegmentPart,
    SegmentState,
    part_ranges,
)
from tierlog.storage.topic_partition import TopicPartition

TP = TopicPartition("orders", 2)
# Ids in creation order, as the uploader's ``created_ms`` are: where entries tie on
# everything else they then order the same way on every run (uuid4 ids made it a coin
# toss, and the chunk tests flaky).
_SEGMENT_IDS = itertools.count(1)


def remote_segment(
    base: int,
    end: int,
    *,
    state: SegmentState = SegmentState.STARTED,
    max_timestamp: int = 1000,
    epoch: int = 1,
    log_bytes: int = 100,
) -> RemoteSegment:
    segment_id = f"{next(_SEGMENT_IDS):032x}"
    return RemoteSegment(
        segment_id=segment_id,
        writer_epoch=epoch,
        state=state,
        base_offset=base,
        end_offset=end,
        base_timestamp=max_timestamp - 10,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=end - 1,
        key=segment_key(TP, base, epoch, segment_id),
        parts=part_ranges({SegmentPart.LOG: log_bytes, SegmentPart.OFFSET_INDEX: 16}),
        created_ms=5,
    )


def uploaded(
    manifest: PartitionManifest, base: int, end: int, *, max_timestamp: int = 1000
) -> PartitionManifest:
    segment = remote_segment(base, end, max_timestamp=max_timestamp)
    return manifest.start_upload(segment).finish_upload(segment.segment_id)


# -- the parts of a segment object --------------------------------------------------------


def test_parts_lie_back_to_back_in_a_fixed_order() -> None:
    ranges = part_ranges({SegmentPart.LOG: 10, SegmentPart.TIME_INDEX: 12})
    segment = dataclasses.replace(remote_segment(0, 5), parts=ranges)
    assert segment.range_of(SegmentPart.LOG) == ByteRange(0, 10)
    assert segment.range_of(SegmentPart.OFFSET_INDEX) == ByteRange(10, 10)
    assert segment.range_of(SegmentPart.TIME_INDEX) == ByteRange(10, 22)
    assert segment.object_size_bytes == 22 and segment.log_size_bytes == 10


def test_a_segment_covers_at_least_one_offset() -> None:
    with pytest.raises(ManifestStateError):
        remote_segment(5, 5)


# -- the life of an upload ----------------------------------------------------------------


def test_started_uploads_are_invisible_until_finished() -> None:
    segment = remote_segment(0, 10)
    started = PartitionManifest(TP).start_upload(segment)
    assert started.view().all_segments() == () and started.end_offset == 0
    finished = started.finish_upload(segment.segment_id)
    assert [s.segment_id for s in finished.view().all_segments()] == [segment.segment_id]
    assert finished.end_offset == 10


def test_an_upload_must_add_offsets_to_the_tier() -> None:
    manifest = uploaded(PartitionManifest(TP), 0, 10)
    with pytest.raises(ManifestStateError):
        manifest.start_upload(remote_segment(5, 10))
    manifest.start_upload(remote_segment(10, 20))  # contiguous
    straddling = uploaded(manifest, 9, 20)  # a local segment across the tier's end
    view = straddling.view()
    assert view.segment_for_offset(9) is view.all_segments()[0]  # the older copy
    assert view.segment_for_offset(10) is view.all_segments()[1]


def test_two_attempts_at_one_segment_only_one_finishes() -> None:
    first, retry = remote_segment(0, 10), remote_segment(0, 10)
    manifest = PartitionManifest(TP).start_upload(first).start_upload(retry)
    manifest = manifest.finish_upload(retry.segment_id)
    with pytest.raises(ManifestStateError):
        manifest.finish_upload(first.segment_id)
    assert [s.state for s in manifest.segments if s.segment_id == first.segment_id] == [
        SegmentState.STARTED
    ]


def test_finishing_twice_or_unknown_is_refused() -> None:
    segment = remote_segment(0, 10)
    manifest = PartitionManifest(TP).start_upload(segment).finish_upload(segment.segment_id)
    with pytest.raises(ManifestStateError):
        manifest.finish_upload(segment.segment_id)
    with pytest.raises(ManifestStateError):
        manifest.finish_upload(new_segment_id())


def test_the_log_start_hides_then_forget_deleted_forgets() -> None:
    manifest = uploaded(uploaded(PartitionManifest(TP), 0, 10), 10, 20)
    dead = manifest.advance_log_start(10)
    view = dead.view()
    assert [s.base_offset for s in view.all_segments()] == [10]
    assert view.log_start_offset == 10
    assert [s.base_offset for s in dead.segments] == [0, 10]  # its object not deleted yet
    forgotten = dead.forget_deleted(10)
    assert [s.base_offset for s in forgotten.segments] == [10]
    assert forgotten.deleted_end_offset == 10
    assert forgotten.forget_deleted(10) == forgotten  # idempotent
    assert dead.forget_deleted(99).deleted_end_offset == 10  # never past the log start


def test_drop_forgets_head_entries() -> None:
    segment = remote_segment(0, 10)
    manifest = PartitionManifest(TP).start_upload(segment)
    dropped = manifest.drop([segment.segment_id, new_segment_id()])
    assert dropped.segments == () and dropped.drop([segment.segment_id]) == dropped


def test_the_log_start_never_moves_back() -> None:
    manifest = PartitionManifest(TP).advance_log_start(50).advance_log_start(20)
    assert manifest.log_start_offset == 50
    assert manifest.end_offset == 50  # an empty tier continues at its log start


# -- the reader's view --------------------------------------------------------------------


def test_view_finds_segments_by_offset_and_by_timestamp() -> None:
    manifest = PartitionManifest(TP)
    manifest = uploaded(manifest, 0, 10, max_timestamp=100)
    manifest = uploaded(manifest, 10, 25, max_timestamp=300)
    manifest = uploaded(manifest, 30, 40, max_timestamp=200)  # a gap the cleaner left
    view = manifest.advance_log_start(3).view()
    assert (view.log_start_offset, view.end_offset) == (3, 40)
    assert view.segment_for_offset(2) is None
    assert view.segment_for_offset(3) is view.all_segments()[0]
    assert view.segment_for_offset(10) is view.all_segments()[1]
    assert view.segment_for_offset(24) is view.all_segments()[1]
    assert view.segment_for_offset(27) is view.all_segments()[2]  # in the gap: the next one
    assert view.segment_for_offset(40) is None
    assert view.segment_for_timestamp(150) is view.all_segments()[1]
    assert view.segment_for_timestamp(301) is None


def test_segments_wholly_below_the_log_start_are_not_in_the_view() -> None:
    manifest = uploaded(uploaded(PartitionManifest(TP), 0, 10), 10, 20).advance_log_start(15)
    view = manifest.view()
    assert [s.base_offset for s in view.all_segments()] == [10]
    assert view.log_start_offset == 15
