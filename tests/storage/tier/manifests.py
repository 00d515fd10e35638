"""Manifests with chunks, built in memory for the pure modules' tests: ``Chunks`` keeps
what ``seal`` produced and reads it back through the real decoder, as a loader."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from tests.storage.tier.test_manifest import TP
from tierlog.storage.tier.manifest import (
    ChunkRef,
    ManifestChange,
    ManifestEntry,
    PartitionManifest,
    RemoteLogView,
    RemoteSegment,
    SegmentState,
)
from tierlog.storage.tier.manifest_chunks import seal
from tierlog.storage.tier.manifest_codec import decode_chunk


class Chunks:
    """Sealed chunks by key; calling it reads one (a ``ChunkLoader``)."""

    def __init__(self) -> None:
        self.bodies: dict[str, bytes] = {}
        self.reads = 0

    def __call__(self, ref: ChunkRef) -> Sequence[ManifestEntry]:
        self.reads += 1
        return decode_chunk(self.bodies[ref.key], ref)

    def apply(
        self, manifest: PartitionManifest, change: ManifestChange, chunk_entries: int | None
    ) -> PartitionManifest:
        """``change`` then sealing, as ``ManifestWriter.update`` does (None: never seal)."""
        changed = change(manifest)
        if chunk_entries is None:
            return changed
        head, sealed = seal(changed, chunk_entries)
        self.bodies.update((chunk.ref.key, chunk.body) for chunk in sealed)
        return head


def upload(manifest: PartitionManifest, segment: RemoteSegment) -> PartitionManifest:
    started = dataclasses.replace(segment, state=SegmentState.STARTED)
    return manifest.start_upload(started).finish_upload(segment.segment_id)


def tier_view(
    segments: Sequence[RemoteSegment],
    *,
    log_start_offset: int = 0,
    chunk_entries: int | None = None,
) -> RemoteLogView:
    """The view of a tier holding ``segments``, sealed into chunks of ``chunk_entries``."""
    chunks = Chunks()
    manifest = PartitionManifest(TP)
    for segment in segments:
        manifest = chunks.apply(manifest, functools.partial(upload, segment=segment), chunk_entries)
    manifest = chunks.apply(
        manifest, lambda m: m.advance_log_start(log_start_offset), chunk_entries
    )
    return manifest.view(chunks)
