"""The state a log starting over at an offset of the tier takes from it.

A log whose local segments begin at a segment boundary of the tier (a replaced pod at
the tier's end, a follower at its leader's local log start) holds none of the batches
below it, so it cannot rebuild its producers or its leader epochs by reading them.
Each segment object carries both as they stood (``segment_object``): the producer
snapshot at the segment's end and the epoch entries in force inside it. Kafka's
follower does the same from its remote segment metadata (KIP-405's
``buildRemoteLogAuxState``).

The epochs are gathered walking back by epoch rather than by segment: the first entry
of a segment's part is the epoch in force at its base, so the next segment to read is
the one holding the offset just before that epoch started. That is one GET per epoch
the tier covers (usually a handful), not one per segment.
"""

from __future__ import annotations

from dataclasses import dataclass

from tierlog.storage.errors import OffsetMovedToTieredStorageError
from tierlog.storage.producer_snapshot import SnapshotEntry, decode_snapshot
from tierlog.storage.tier.manifest import RemoteLogView, SegmentPart
from tierlog.storage.tier.manifest_store import read_part
from tierlog.storage.tier.segment_object import decode_leader_epochs
from tierlog.storage.tier.store import ObjectStore

__all__ = ["TierState", "tier_state_at"]


@dataclass(frozen=True)
class TierState:
    """What the log below ``offset`` leaves to the log continuing there."""

    offset: int
    producers: tuple[SnapshotEntry, ...]
    leader_epochs: tuple[tuple[int, int], ...]  # (epoch, start offset), rising


def tier_state_at(store: ObjectStore, view: RemoteLogView, offset: int) -> TierState:
    """The producers and leader epochs of the tier's log below ``offset``, which must be
    the end of one of its segments (or its log start: nothing below it is kept).

    Raises OFFSET_MOVED_TO_TIERED_STORAGE when no segment of the tier ends there: the
    tier does not (yet) reach that offset, or is another broker's."""
    if offset <= view.log_start_offset:
        return TierState(offset, (), ())
    segment = view.segment_for_offset(offset - 1)
    if segment is None or segment.end_offset != offset:
        raise OffsetMovedToTieredStorageError(
            f"{view.tp}: the tier [{view.log_start_offset}, {view.end_offset}) has no "
            f"segment ending at {offset}"
        )
    producers = read_part(store, segment, SegmentPart.PRODUCER_SNAPSHOT)
    return TierState(
        offset,
        tuple(decode_snapshot(producers)) if producers else (),
        tuple(_epochs_below(store, view, offset)),
    )


def _epochs_below(store: ObjectStore, view: RemoteLogView, offset: int) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    below = offset - 1
    while (segment := view.segment_for_offset(below)) is not None and segment.base_offset <= below:
        part = read_part(store, segment, SegmentPart.LEADER_EPOCHS)
        in_force = [entry for entry in decode_leader_epochs(part) if entry[1] <= below]
        if not in_force:
            break  # uploaded before segments carried their epochs
        found[:0] = in_force
        below = in_force[0][1] - 1
    return found
