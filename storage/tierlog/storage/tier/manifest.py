"""A partition's remote metadata: its tiered segments and its log start in the tier.

Pure: values, the state changes the uploader and retention make, and the JSON
encoding; ``manifest_store`` does the I/O.

Each uploaded segment is one object holding, at byte ranges recorded here, the log
bytes, the trimmed offset and time indexes (Kafka's formats, relative to the
segment's base offset), the producer-state snapshot at the segment's end offset and
the leader-epoch entries covering it. An entry moves ``started`` (the attempt's
object may be partly written; readers never see it) → ``finished`` (complete and
readable) → ``deleting`` (going; readers no longer see it) → gone from the manifest.
Entries leave the manifest once their object is deleted, so it stays as small as
the tier's live segments, however many were ever uploaded.

Invariants kept by the changes below: every finished segment ends after the one
before it (an upload must add offsets to the tier; it may overlap the tier's end
when a local segment straddles it, e.g. a volume older than the tier, and a reader
then takes the older copy of the overlapping offsets); the log start offset never
moves back.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from tierlog.storage.checkpoints import TopicPartition
from tierlog.storage.errors import KafkaStorageError, TierlogError

__all__ = [
    "FORMAT_VERSION",
    "ByteRange",
    "CorruptManifestError",
    "FencedWriterError",
    "ManifestChange",
    "ManifestStateError",
    "PartitionManifest",
    "RemoteLogView",
    "RemoteSegment",
    "SegmentPart",
    "SegmentState",
    "decode_manifest",
    "encode_manifest",
]

FORMAT_VERSION = 1


class CorruptManifestError(KafkaStorageError):
    """A manifest object that is not a manifest of this format."""


class FencedWriterError(TierlogError):
    """Another writer with a newer (or the same) writer epoch owns the partition's tier:
    this one was deposed and must stop writing."""

    reason = "FENCED_LEADER_EPOCH"


class ManifestStateError(TierlogError):
    """A change that would break the manifest's invariants (overlap, unknown entry...)."""

    reason = "INVALID_REQUEST"


class SegmentState(Enum):
    STARTED = "started"
    FINISHED = "finished"
    DELETING = "deleting"


class SegmentPart(Enum):
    """The parts of a segment object, in the order they are laid out."""

    LOG = "log"
    OFFSET_INDEX = "offset_index"
    TIME_INDEX = "time_index"
    PRODUCER_SNAPSHOT = "producer_snapshot"
    LEADER_EPOCHS = "leader_epochs"


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
class RemoteLogView:
    """What a reader sees of a partition's tier: finished segments holding offsets at or
    above the log start, in offset order."""

    tp: TopicPartition
    log_start_offset: int
    end_offset: int  # one past the tier's last offset (= log start when it is empty)
    segments: tuple[RemoteSegment, ...]

    def segment_for_offset(self, offset: int) -> RemoteSegment | None:
        """The segment holding ``offset``, or the first one after it when ``offset``
        falls in a gap (e.g. between batches a cleaner removed); None past the end or
        below the log start."""
        if offset < self.log_start_offset or offset >= self.end_offset:
            return None
        ends = [segment.end_offset for segment in self.segments]
        index = bisect.bisect_right(ends, offset)
        return self.segments[index] if index < len(self.segments) else None

    def segment_for_timestamp(self, timestamp: int) -> RemoteSegment | None:
        """The first segment whose max timestamp is at or above ``timestamp``."""
        for segment in self.segments:
            if segment.max_timestamp >= timestamp:
                return segment
        return None

    @property
    def size_bytes(self) -> int:
        return sum(segment.log_size_bytes for segment in self.segments)


@dataclass(frozen=True)
class PartitionManifest:
    """One version of a partition's manifest. Version 0 is the empty, never-written one."""

    tp: TopicPartition
    version: int = 0
    writer_epoch: int = 0
    writer_id: str = ""
    log_start_offset: int = 0
    segments: tuple[RemoteSegment, ...] = ()  # in (base offset, created) order

    def with_segments(self, segments: Collection[RemoteSegment]) -> PartitionManifest:
        ordered = sorted(segments, key=lambda s: (s.base_offset, s.created_ms, s.segment_id))
        return dataclasses.replace(self, segments=tuple(ordered))

    def in_state(self, state: SegmentState) -> tuple[RemoteSegment, ...]:
        return tuple(segment for segment in self.segments if segment.state is state)

    @property
    def finished(self) -> tuple[RemoteSegment, ...]:
        return self.in_state(SegmentState.FINISHED)

    @property
    def end_offset(self) -> int:
        """One past the last tiered offset (never below the log start): where a local
        log continues the tier."""
        return max(self.uploaded_end_offset, self.log_start_offset)

    @property
    def uploaded_end_offset(self) -> int:
        """One past the last finished segment (0 when there is none): uploads start here."""
        finished = self.finished
        return finished[-1].end_offset if finished else 0

    def segment(self, segment_id: str) -> RemoteSegment:
        for segment in self.segments:
            if segment.segment_id == segment_id:
                return segment
        raise ManifestStateError(f"{self.tp}: no segment {segment_id} in the manifest")

    def view(self) -> RemoteLogView:
        visible = tuple(s for s in self.finished if s.end_offset > self.log_start_offset)
        start = max(self.log_start_offset, visible[0].base_offset) if visible else self.end_offset
        return RemoteLogView(self.tp, start, self.end_offset, visible)

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
        return self._replace_segment(dataclasses.replace(segment, state=SegmentState.FINISHED))

    def start_deletion(self, segment_ids: Collection[str]) -> PartitionManifest:
        """Hide segments from readers before their objects go (a crash leaves them
        ``deleting``, and the next pass finishes the job)."""
        changed = self
        for segment_id in segment_ids:
            segment = changed.segment(segment_id)
            changed = changed._replace_segment(
                dataclasses.replace(segment, state=SegmentState.DELETING)
            )
        return changed

    def drop(self, segment_ids: Collection[str]) -> PartitionManifest:
        """Forget segments whose objects are gone; unknown ids are already forgotten."""
        doomed = set(segment_ids)
        return self.with_segments([s for s in self.segments if s.segment_id not in doomed])

    def advance_log_start(self, offset: int) -> PartitionManifest:
        return dataclasses.replace(self, log_start_offset=max(self.log_start_offset, offset))

    def _replace_segment(self, new: RemoteSegment) -> PartitionManifest:
        return self.with_segments(
            [new if s.segment_id == new.segment_id else s for s in self.segments]
        )


ManifestChange = Callable[[PartitionManifest], PartitionManifest]


# -- encoding -------------------------------------------------------------------------


def encode_manifest(manifest: PartitionManifest) -> bytes:
    """The manifest as compact, key-sorted JSON (one byte string per value)."""
    document = {
        "format": FORMAT_VERSION,
        "topic": manifest.tp.topic,
        "partition": manifest.tp.partition,
        "version": manifest.version,
        "writer_epoch": manifest.writer_epoch,
        "writer_id": manifest.writer_id,
        "log_start_offset": manifest.log_start_offset,
        "segments": [_encode_segment(segment) for segment in manifest.segments],
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _encode_segment(segment: RemoteSegment) -> dict[str, Any]:
    return {
        "id": segment.segment_id,
        "writer_epoch": segment.writer_epoch,
        "state": segment.state.value,
        "base_offset": segment.base_offset,
        "end_offset": segment.end_offset,
        "base_timestamp": segment.base_timestamp,
        "max_timestamp": segment.max_timestamp,
        "offset_of_max_timestamp": segment.offset_of_max_timestamp,
        "key": segment.key,
        "parts": {part.value: list(r) for part, r in zip(SegmentPart, segment.parts, strict=True)},
        "created_ms": segment.created_ms,
    }


def decode_manifest(data: bytes) -> PartitionManifest:
    """Parse ``encode_manifest``'s output; anything else raises CorruptManifestError."""
    try:
        document = json.loads(data)
        if document["format"] != FORMAT_VERSION:
            raise CorruptManifestError(f"manifest format {document['format']} is not supported")
        return PartitionManifest(
            tp=TopicPartition(_str(document["topic"]), _int(document["partition"])),
            version=_int(document["version"]),
            writer_epoch=_int(document["writer_epoch"]),
            writer_id=_str(document["writer_id"]),
            log_start_offset=_int(document["log_start_offset"]),
            segments=tuple(_decode_segment(entry) for entry in document["segments"]),
        )
    except CorruptManifestError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, ManifestStateError) as error:
        raise CorruptManifestError(f"not a tier manifest: {error!r}") from error


def _decode_segment(entry: dict[str, Any]) -> RemoteSegment:
    parts = entry["parts"]
    return RemoteSegment(
        segment_id=_str(entry["id"]),
        writer_epoch=_int(entry["writer_epoch"]),
        state=SegmentState(entry["state"]),
        base_offset=_int(entry["base_offset"]),
        end_offset=_int(entry["end_offset"]),
        base_timestamp=_int(entry["base_timestamp"]),
        max_timestamp=_int(entry["max_timestamp"]),
        offset_of_max_timestamp=_int(entry["offset_of_max_timestamp"]),
        key=_str(entry["key"]),
        parts=tuple(ByteRange(*map(_int, parts[part.value])) for part in SegmentPart),
        created_ms=_int(entry["created_ms"]),
    )


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value
