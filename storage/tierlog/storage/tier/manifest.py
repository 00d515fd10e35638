"""A partition's remote metadata: its tiered segments and its log start in the tier.

Pure: values, the state changes the uploader and retention make, and what a reader
sees; ``manifest_codec`` encodes them as JSON, ``manifest_chunks`` seals chunks and
finds what deletion and the sweep need, ``manifest_store`` does the I/O.

Each uploaded segment is one object holding, at byte ranges recorded here, the log
bytes, the trimmed offset and time indexes (Kafka's formats, relative to the
segment's base offset), the producer-state snapshot at the segment's end offset and
the leader-epoch entries covering it. An entry moves ``started`` (the attempt's
object may be partly written; readers never see it) → ``finished`` (complete and
readable) → dead, once the log start offset reaches its end (readers no longer see
it; its object is deleted) → forgotten.

A manifest version is a small *head* plus immutable *chunks* it refers to. The head
holds the started entries, the newest finished ones and references (``ChunkRef``) to
sealed chunks; a chunk, written once and never changed, holds a bounded run of older
finished entries (level 1) or of references to chunks one level down (level 2 and
up), and its reference records the offsets, times and bytes under it. So a change
writes a head whose size does not grow with the number of segments (fewer than
twice ``chunk_entries`` live entries, and as many references per level, the levels
growing as the logarithm of the segment count), a lookup by offset or timestamp loads
only the chunks on one path down, and retention from the front forgets whole chunks
once every entry under them is dead; dead entries inside a chunk that still holds
live ones are simply skipped. ``deleted_end_offset`` records how far deletion got:
every finished segment and chunk ending at or below it has no object any more.

Invariants kept by the changes below: every finished segment ends after the one
before it (an upload must add offsets to the tier; it may overlap the tier's end
when a local segment straddles it, e.g. a volume older than the tier, and a reader
then takes the older copy of the overlapping offsets), so chunks and the head's
finished entries follow each other in end offset order; the log start offset never
moves back, and the deleted end never passes it.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from tierlog.storage.errors import KafkaStorageError, TierlogError
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "ByteRange",
    "ChunkLoader",
    "ChunkRef",
    "CorruptManifestError",
    "FencedWriterError",
    "ManifestChange",
    "ManifestEntry",
    "ManifestStateError",
    "ManifestVanishedError",
    "PartitionManifest",
    "RemoteLogView",
    "RemoteSegment",
    "SegmentPart",
    "SegmentState",
    "part_ranges",
    "walk_segments",
]


class CorruptManifestError(KafkaStorageError):
    """A manifest object that is not a manifest of this format."""


class FencedWriterError(TierlogError):
    """Another writer with a newer (or the same) writer epoch owns the partition's tier:
    this one was deposed and must stop writing."""

    reason = "FENCED_LEADER_EPOCH"


class ManifestVanishedError(KafkaStorageError):
    """The partition's manifest is no longer in the store (the bucket was deleted and
    recreated, or emptied): the tier lost what it held, and writing the next version
    from memory would name objects that are gone. Uploads stop until an operator
    rebases the partition (``tierlog tier rebase``) or restores the bucket."""


class ManifestStateError(TierlogError):
    """A change that would break the manifest's invariants (overlap, unknown entry...)."""

    reason = "INVALID_REQUEST"


class SegmentState(Enum):
    STARTED = "started"
    FINISHED = "finished"


class SegmentPart(Enum):
    """The parts of a segment object, in the order they are laid out."""

    LOG = "log"
    OFFSET_INDEX = "offset_index"
    TIME_INDEX = "time_index"
    PRODUCER_SNAPSHOT = "producer_snapshot"
    LEADER_EPOCHS = "leader_epochs"
    # The segment's .txnindex; entries written before it was uploaded lack it (empty).
    TXN_INDEX = "txn_index"


class ByteRange(NamedTuple):
    """Bytes ``[start, end)`` of a segment object."""

    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class RemoteSegment:
    """One uploaded segment: which offsets and times it covers and where its parts are."""

    segment_id: str  # the upload attempt's fresh id
    writer_epoch: int
    state: SegmentState
    base_offset: int
    end_offset: int  # one past its last offset: the next segment's base offset
    base_timestamp: int  # the first batch's max timestamp (-1: no timestamps)
    max_timestamp: int
    offset_of_max_timestamp: int
    key: str  # the object holding every part
    parts: tuple[ByteRange, ...]  # one per SegmentPart, in that order
    created_ms: int  # when the attempt started (the sweep ages out started entries)

    def __post_init__(self) -> None:
        if len(self.parts) != len(SegmentPart):
            raise ManifestStateError(f"segment {self.segment_id} has {len(self.parts)} parts")
        if not 0 <= self.base_offset < self.end_offset:
            raise ManifestStateError(
                f"segment {self.segment_id} covers no offsets [{self.base_offset}, "
                f"{self.end_offset})"
            )
        position = 0
        for part in self.parts:
            if part.start != position or part.end < part.start:
                raise ManifestStateError(f"segment {self.segment_id} parts are not contiguous")
            position = part.end

    @property
    def last_offset(self) -> int:
        return self.end_offset - 1

    def range_of(self, part: SegmentPart) -> ByteRange:
        return self.parts[list(SegmentPart).index(part)]

    @property
    def log_size_bytes(self) -> int:
        return self.range_of(SegmentPart.LOG).length

    @property
    def object_size_bytes(self) -> int:
        return self.parts[-1].end

    @property
    def retention_timestamp(self) -> int:
        """What time retention compares: the max timestamp, else when it was uploaded."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.created_ms

    def holds(self, offset: int) -> bool:
        return self.base_offset <= offset < self.end_offset


def part_ranges(lengths: Mapping[SegmentPart, int]) -> tuple[ByteRange, ...]:
    """The ranges of parts of these lengths laid out back to back in ``SegmentPart`` order."""
    ranges: list[ByteRange] = []
    position = 0
    for part in SegmentPart:
        ranges.append(ByteRange(position, position + lengths.get(part, 0)))
        position = ranges[-1].end
    return tuple(ranges)


@dataclass(frozen=True)
class ChunkRef:
    """A sealed chunk: its key and what lies under it (enough to pass it by unread)."""

    key: str
    level: int  # 1: holds segment entries; n > 1: references to chunks of level n - 1
    base_offset: int  # its first segment's base offset
    end_offset: int  # its last segment's end offset
    segment_count: int
    log_size_bytes: int  # the log bytes of its segments
    max_timestamp: int  # the largest max timestamp of its segments (-1: none)
    retention_timestamp: int  # the largest ``RemoteSegment.retention_timestamp`` under it


ManifestEntry = RemoteSegment | ChunkRef  # what a head or a chunk lists
ChunkLoader = Callable[[ChunkRef], Sequence[ManifestEntry]]  # a chunk's entries, read


def _no_chunks(chunk: ChunkRef) -> Sequence[ManifestEntry]:
    raise ManifestStateError(f"{chunk.key} cannot be read: this view has no chunk loader")


def walk_segments(
    entries: Sequence[ManifestEntry],
    load_chunk: ChunkLoader,
    floor: int,
    min_max_timestamp: int | None = None,
) -> Iterator[RemoteSegment]:
    """The segments under ``entries`` (in offset order) that end after ``floor``, in
    order, loading a chunk only when the walk reaches it; with ``min_max_timestamp``,
    only segments whose max timestamp reaches it (whole chunks below it are skipped)."""
    ends = [entry.end_offset for entry in entries]
    for entry in entries[bisect.bisect_right(ends, floor) :]:
        if min_max_timestamp is not None and entry.max_timestamp < min_max_timestamp:
            continue
        if isinstance(entry, RemoteSegment):
            yield entry
        else:
            yield from walk_segments(load_chunk(entry), load_chunk, floor, min_max_timestamp)


@dataclass(frozen=True)
class RemoteLogView:
    """What a reader sees of a partition's tier: the finished segments holding offsets
    at or above the log start, in offset order, some of them in chunks read on demand."""

    tp: TopicPartition
    log_start_offset: int
    end_offset: int  # one past the tier's last offset (= log start when it is empty)
    top: tuple[ManifestEntry, ...]  # the head's live chunks, then its live finished entries
    load_chunk: ChunkLoader = field(default=_no_chunks, compare=False, repr=False)
    floor: int = 0  # the manifest's log start: segments ending at or below it are dead

    def segments_from(
        self, offset: int, *, min_max_timestamp: int | None = None
    ) -> Iterator[RemoteSegment]:
        """Live segments ending after ``offset``, in order (see ``walk_segments``)."""
        floor = max(offset, self.floor)
        return walk_segments(self.top, self.load_chunk, floor, min_max_timestamp)

    def all_segments(self) -> tuple[RemoteSegment, ...]:
        """Every live segment (reads every chunk: for tools, not for lookups)."""
        return tuple(self.segments_from(self.floor))

    def segment_for_offset(self, offset: int) -> RemoteSegment | None:
        """The segment holding ``offset``, or the first one after it when ``offset``
        falls in a gap (e.g. between batches a cleaner removed); None past the end or
        below the log start."""
        if offset < self.log_start_offset or offset >= self.end_offset:
            return None
        return next(self.segments_from(offset), None)

    def segment_for_timestamp(self, timestamp: int) -> RemoteSegment | None:
        """The first segment whose max timestamp is at or above ``timestamp``."""
        return next(self.segments_from(self.floor, min_max_timestamp=timestamp), None)

    def last_segment(self) -> RemoteSegment | None:
        entries: Sequence[ManifestEntry] = self.top
        while entries:
            last = entries[-1]
            if isinstance(last, RemoteSegment):
                return last
            entries = self.load_chunk(last)
        return None

    def segment_with_max_timestamp(self) -> RemoteSegment | None:
        """The first live segment with the largest max timestamp (None: no segments)."""
        entries: Sequence[ManifestEntry] = self.top
        while entries:
            live = [entry for entry in entries if entry.end_offset > self.floor]
            largest = [self._live_max_timestamp(entry) for entry in live]
            best = live[largest.index(max(largest))]
            if isinstance(best, RemoteSegment):
                return best
            entries = self.load_chunk(best)
        return None

    def _live_max_timestamp(self, entry: ManifestEntry) -> int:
        if isinstance(entry, RemoteSegment) or entry.base_offset >= self.floor:
            return entry.max_timestamp  # nothing dead under it
        live = [e for e in self.load_chunk(entry) if e.end_offset > self.floor]
        return max((self._live_max_timestamp(e) for e in live), default=-1)


@dataclass(frozen=True)
class PartitionManifest:
    """One version of a partition's manifest head. Version 0 is the empty, never-written
    one."""

    tp: TopicPartition
    version: int = 0
    writer_epoch: int = 0
    writer_id: str = ""
    log_start_offset: int = 0
    # Objects of finished segments and chunks ending at or below it are deleted.
    deleted_end_offset: int = 0
    # The tier cleaner's checkpoint: the tier below it is cleaned (its first dirty
    # offset), moved by the change that swaps cleaned segments in.
    cleaner_offset: int = 0
    chunks: tuple[ChunkRef, ...] = ()  # sealed, in offset order
    segments: tuple[RemoteSegment, ...] = ()  # the head's entries, in end offset order

    def with_segments(self, segments: Collection[RemoteSegment]) -> PartitionManifest:
        """The head with these entries in end offset order: the order finished ones were
        finished in, which lookups bisect and sealing takes the oldest from. Base offset
        order is not it: an upload started at the tier's end may finish after a shorter
        one from the same base, and would then hide the offsets only it holds."""
        ordered = sorted(segments, key=lambda s: (s.end_offset, s.created_ms, s.segment_id))
        return dataclasses.replace(self, segments=tuple(ordered))

    def in_state(self, state: SegmentState) -> tuple[RemoteSegment, ...]:
        """The head's entries in ``state`` (finished ones in chunks are not among them)."""
        return tuple(segment for segment in self.segments if segment.state is state)

    @property
    def end_offset(self) -> int:
        """One past the last tiered offset (never below the log start): where a local
        log continues the tier."""
        return max(self.uploaded_end_offset, self.log_start_offset)

    @property
    def uploaded_end_offset(self) -> int:
        """One past the last finished segment (0 when there is none): uploads start here."""
        ends = [segment.end_offset for segment in self.in_state(SegmentState.FINISHED)]
        return max([*ends, *(chunk.end_offset for chunk in self.chunks[-1:])], default=0)

    def segment(self, segment_id: str) -> RemoteSegment:
        """An entry of the head (a started one, or one of the newest finished ones)."""
        for segment in self.segments:
            if segment.segment_id == segment_id:
                return segment
        raise ManifestStateError(f"{self.tp}: no segment {segment_id} in the manifest head")

    def view(self, load_chunk: ChunkLoader = _no_chunks) -> RemoteLogView:
        entries: tuple[ManifestEntry, ...] = (*self.chunks, *self.in_state(SegmentState.FINISHED))
        top = tuple(entry for entry in entries if entry.end_offset > self.log_start_offset)
        start = max(self.log_start_offset, top[0].base_offset) if top else self.end_offset
        return RemoteLogView(
            self.tp, start, self.end_offset, top, load_chunk, floor=self.log_start_offset
        )

    # -- the changes writers make (each returns a new manifest) -------------------------

    def start_upload(self, segment: RemoteSegment) -> PartitionManifest:
        if segment.state is not SegmentState.STARTED:
            raise ManifestStateError(f"a new upload starts as started, not {segment.state}")
        if segment.end_offset <= self.uploaded_end_offset:
            raise ManifestStateError(
                f"{self.tp}: upload of [{segment.base_offset}, {segment.end_offset}) adds "
                f"nothing to the tier, which ends at {self.uploaded_end_offset}"
            )
        if any(existing.segment_id == segment.segment_id for existing in self.segments):
            raise ManifestStateError(f"{self.tp}: segment id {segment.segment_id} is taken")
        return self.with_segments([*self.segments, segment])

    def finish_upload(self, segment_id: str) -> PartitionManifest:
        segment = self.segment(segment_id)
        if segment.state is not SegmentState.STARTED:
            raise ManifestStateError(f"{self.tp}: segment {segment_id} is {segment.state.value}")
        if segment.end_offset <= self.uploaded_end_offset:
            raise ManifestStateError(
                f"{self.tp}: segment {segment_id} adds nothing to the tier, which now ends "
                f"at {self.uploaded_end_offset}"
            )
        finished = dataclasses.replace(segment, state=SegmentState.FINISHED)
        return self.with_segments(
            [finished if s.segment_id == segment_id else s for s in self.segments]
        )

    def drop(self, segment_ids: Collection[str]) -> PartitionManifest:
        """Forget head entries whose objects are gone; unknown ids are already forgotten."""
        doomed = set(segment_ids)
        return self.with_segments([s for s in self.segments if s.segment_id not in doomed])

    def advance_log_start(self, offset: int) -> PartitionManifest:
        """Move the log start up: finished segments ending at or below it are dead at
        once (hidden from readers), their objects deleted next (``forget_deleted``)."""
        return dataclasses.replace(self, log_start_offset=max(self.log_start_offset, offset))

    def forget_deleted(self, end_offset: int) -> PartitionManifest:
        """The objects of every dead segment and chunk ending at or below ``end_offset``
        are deleted: drop the head's entries and references to them."""
        deleted = max(self.deleted_end_offset, min(end_offset, self.log_start_offset))

        def kept(entry: ManifestEntry) -> bool:
            started = isinstance(entry, RemoteSegment) and entry.state is SegmentState.STARTED
            return started or entry.end_offset > deleted

        return dataclasses.replace(
            self,
            deleted_end_offset=deleted,
            chunks=tuple(filter(kept, self.chunks)),
            segments=tuple(filter(kept, self.segments)),
        )


ManifestChange = Callable[[PartitionManifest], PartitionManifest]
