"""Sealing a manifest head's entries into chunks, and walking chunks for the deletions
and the sweep (pure: chunks are read through a ``ChunkLoader``).

``seal`` runs on every change before the head is stored. Once the head holds
twice ``chunk_entries`` live finished entries, the oldest ``chunk_entries`` become a level 1
chunk; once it holds twice ``chunk_entries`` live references of one level, the oldest
``chunk_entries`` of them become a chunk one level up. The newest entries stay in the head,
so the segment a writer just finished is always found there.

``replace_segments`` is the tier cleaner's swap: runs of finished segments give way
to the cleaned segments covering the same offsets. It flattens the head (every entry
not yet deleted back in it, no chunks) and lets ``seal`` build the chunks again: a
chunk is immutable and a cleaned run may begin or end inside one, and a cleaning pass
reads every segment of the run anyway, so rewriting the chunks (a small fraction of
those bytes) keeps the structure simple. The chunks no head reaches any more go with
the sweep's orphans.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from tierlog.storage.tier.layout import chunk_key, parse_segment_key
from tierlog.storage.tier.manifest import (
    ChunkLoader,
    ChunkRef,
    ManifestEntry,
    ManifestStateError,
    PartitionManifest,
    RemoteSegment,
    SegmentState,
    walk_segments,
)
from tierlog.storage.tier.manifest_codec import encode_chunk
from tierlog.storage.tier.store import ObjectNotFoundError

__all__ = [
    "CHUNK_ENTRIES",
    "DeadObjects",
    "SealedChunk",
    "Swap",
    "dead_objects",
    "names_segment",
    "referenced_chunks",
    "replace_segments",
    "seal",
]

_Entry = TypeVar("_Entry", RemoteSegment, ChunkRef)

CHUNK_ENTRIES = 32  # entries a chunk holds; a head fewer than twice as many per kind


@dataclass(frozen=True)
class SealedChunk:
    """A chunk to PUT before the head that refers to it."""

    ref: ChunkRef
    body: bytes


def seal(
    manifest: PartitionManifest, chunk_entries: int = CHUNK_ENTRIES
) -> tuple[PartitionManifest, tuple[SealedChunk, ...]]:
    """The head with its oldest entries moved into new chunks, and those chunks."""
    if chunk_entries < 2:
        raise ValueError(f"a chunk holds at least 2 entries, not {chunk_entries}")
    sealed: list[SealedChunk] = []
    head = manifest
    while len(finished := _live(head, head.in_state(SegmentState.FINISHED))) >= 2 * chunk_entries:
        chunk = _chunk(head, 1, finished[:chunk_entries])
        taken = {segment.segment_id for segment in finished[:chunk_entries]}
        kept = [segment for segment in head.segments if segment.segment_id not in taken]
        head = _with_chunks(head.with_segments(kept), [*head.chunks, chunk.ref])
        sealed.append(chunk)
    level = 1
    while any(ref.level >= level for ref in head.chunks):
        same = _live(head, [ref for ref in head.chunks if ref.level == level])
        if len(same) < 2 * chunk_entries:
            level += 1
            continue
        chunk = _chunk(head, level + 1, same[:chunk_entries])
        folded = set(same[:chunk_entries])
        head = _with_chunks(head, [*(r for r in head.chunks if r not in folded), chunk.ref])
        sealed.append(chunk)
    return head, tuple(sealed)


def _live(head: PartitionManifest, entries: Sequence[_Entry]) -> list[_Entry]:
    return [entry for entry in entries if entry.end_offset > head.log_start_offset]


def _with_chunks(head: PartitionManifest, chunks: Sequence[ChunkRef]) -> PartitionManifest:
    return dataclasses.replace(head, chunks=tuple(sorted(chunks, key=lambda r: r.end_offset)))


def _chunk(head: PartitionManifest, level: int, entries: Sequence[ManifestEntry]) -> SealedChunk:
    body = encode_chunk(head.tp, level, entries)
    base, end = entries[0].base_offset, entries[-1].end_offset
    ref = ChunkRef(
        key=chunk_key(head.tp, base, end, level, body),
        level=level,
        base_offset=base,
        end_offset=end,
        segment_count=sum(_segment_count(entry) for entry in entries),
        log_size_bytes=sum(entry.log_size_bytes for entry in entries),
        max_timestamp=max(entry.max_timestamp for entry in entries),
        retention_timestamp=max(entry.retention_timestamp for entry in entries),
    )
    return SealedChunk(ref, body)


def _segment_count(entry: ManifestEntry) -> int:
    return 1 if isinstance(entry, RemoteSegment) else entry.segment_count


def _everything(manifest: PartitionManifest) -> tuple[ManifestEntry, ...]:
    """The head's chunks and finished entries, dead ones included, in offset order (a
    dead entry kept for deletion may be older than a chunk sealed after it)."""
    entries: list[ManifestEntry] = [*manifest.chunks, *manifest.in_state(SegmentState.FINISHED)]
    return tuple(sorted(entries, key=lambda entry: entry.end_offset))


@dataclass(frozen=True)
class DeadObjects:
    """What deletion still has to remove: segments and chunks below the log start."""

    segments: tuple[RemoteSegment, ...]
    chunk_keys: tuple[str, ...]  # each after the chunks and segments under it

    @property
    def keys(self) -> list[str]:
        """Segment objects first, then chunks: a chunk goes only once what it names is gone."""
        return [*(segment.key for segment in self.segments), *self.chunk_keys]


def dead_objects(manifest: PartitionManifest, load_chunk: ChunkLoader) -> DeadObjects:
    """Segments and chunks ending in ``(deleted_end_offset, log_start_offset]``.

    A dead chunk that is already gone was deleted after everything under it (an
    interrupted deletion): it is passed over."""
    low, high = manifest.deleted_end_offset, manifest.log_start_offset
    segments: list[RemoteSegment] = []
    chunks: list[str] = []

    def walk(entries: Sequence[ManifestEntry]) -> None:
        for entry in entries:
            if entry.end_offset <= low:
                continue
            if entry.base_offset >= high:
                return  # this one and all after it end above the log start
            if isinstance(entry, RemoteSegment):
                if entry.end_offset <= high:
                    segments.append(entry)
                continue
            try:
                walk(load_chunk(entry))
            except ObjectNotFoundError:
                if entry.end_offset > high:
                    raise
                continue
            if entry.end_offset <= high:
                chunks.append(entry.key)

    walk(_everything(manifest))
    return DeadObjects(tuple(segments), tuple(chunks))


def referenced_chunks(manifest: PartitionManifest, load_chunk: ChunkLoader) -> set[str]:
    """Keys of the chunks the head reaches that are not yet deleted (reads every chunk
    above level 1, a small fraction of them)."""
    keys: set[str] = set()

    def walk(entries: Sequence[ManifestEntry]) -> None:
        for entry in entries:
            if isinstance(entry, ChunkRef) and entry.end_offset > manifest.deleted_end_offset:
                keys.add(entry.key)
                if entry.level > 1:
                    walk(load_chunk(entry))

    walk(manifest.chunks)
    return keys


def names_segment(manifest: PartitionManifest, load_chunk: ChunkLoader, key: str) -> bool:
    """Whether an entry not yet deleted names the segment object ``key`` (the head's, or
    a chunk's on the path to its base offset)."""
    if any(segment.key == key for segment in manifest.segments):
        return True
    parsed = parse_segment_key(key)
    if parsed is None:
        return False
    floor = max(parsed.base_offset, manifest.deleted_end_offset)
    for segment in walk_segments(_everything(manifest), load_chunk, floor):
        if segment.base_offset > parsed.base_offset:
            return False
        if segment.key == key:
            return True
    return False


class Swap(NamedTuple):
    """A run of finished segments and the cleaned segment that replaces it."""

    replaced: tuple[RemoteSegment, ...]
    cleaned: RemoteSegment


def replace_segments(
    manifest: PartitionManifest,
    load_chunk: ChunkLoader,
    swaps: Sequence[Swap],
    cleaner_offset: int,
) -> PartitionManifest:
    """The head with each swap's run replaced by its cleaned segment (finished, ending
    where the run ends and starting in its first segment: above that segment's base
    when the segment before it overlaps it) and the cleaner's offset moved to
    ``cleaner_offset``; flat, to be sealed again (see the module doc). No swaps: only
    the offset moves.

    ``ManifestStateError`` when a run is no longer in the manifest as it was read (a
    change between the cleaning and the swap): the swap must not guess."""
    offset = max(manifest.cleaner_offset, cleaner_offset)
    if not swaps:
        return dataclasses.replace(manifest, cleaner_offset=offset)
    finished = list(walk_segments(_everything(manifest), load_chunk, manifest.deleted_end_offset))
    at = {segment.segment_id: index for index, segment in enumerate(finished)}
    cleaned_at: dict[int, RemoteSegment] = {}
    gone: set[int] = set()
    for run, cleaned in swaps:
        first = at.get(run[0].segment_id, -1) if run else -1
        ids = [segment.segment_id for segment in finished[first : first + len(run)]]
        if first < 0 or ids != [segment.segment_id for segment in run]:
            raise ManifestStateError(
                f"{manifest.tp}: a cleaned run changed in the manifest meanwhile"
            )
        if (
            not run[0].base_offset <= cleaned.base_offset < run[0].end_offset
            or cleaned.end_offset != run[-1].end_offset
            or cleaned.state is not SegmentState.FINISHED
        ):
            raise ManifestStateError(f"{manifest.tp}: {cleaned.segment_id} does not cover its run")
        cleaned_at[first] = cleaned
        gone.update(range(first, first + len(run)))
    kept = [
        cleaned_at.get(index, segment)
        for index, segment in enumerate(finished)
        if index in cleaned_at or index not in gone
    ]
    started = manifest.in_state(SegmentState.STARTED)
    flat = dataclasses.replace(manifest, chunks=(), cleaner_offset=offset)
    return flat.with_segments([*started, *kept])
