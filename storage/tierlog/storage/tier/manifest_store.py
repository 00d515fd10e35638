"""Reading and writing partition manifests in the object store, with writer fencing.

Each change first PUTs the chunks it seals (``manifest_chunks.seal``; each under a key
named by its bytes, so writing one again is harmless), then writes the next head
version as a new object, only if that key is absent: of
two writers racing for a version exactly one wins. The loser reloads; when the
winner has a newer writer epoch (or the same epoch but another writer id) the loser
has been deposed and gets ``FencedWriterError``; when the winner is older (a deposed
owner that has not noticed yet), the change is re-applied on top of the winner's
version and tried again. A put that failed ambiguously (it may have landed) and is
retried finds its own bytes under the key and counts as done.

Before each put the version the change builds on must still be stored (a HEAD): a
bucket deleted and recreated empty would otherwise take the next version, built from
the writer's memory, naming objects that are gone. Nothing newer there either means
the manifest vanished (``ManifestVanishedError``): the writer stops, and only an
operator's rebase (or a restored bucket) lets the partition upload again.

Versions older than the newest few are deleted after each change (best effort: a
left-over old version is harmless and the next change removes it).

A garbled newest head (bytes that do not decode) is a storage error for writers: it
is the latest committed change, and what only it records (an upload, a deletion, a
newer writer epoch) is unknown, so a claim or a change built on an older head could
hide uploaded offsets, name deleted objects or slip past the fence. Only the writer
that holds that version in memory writes the next one (its base is still stored), at
its next change or ``refresh`` (the sweep's), and that version supersedes it. Readers
fall back to the newest head
that decodes (``load_readable_manifest``) and are told which is garbled.

Readers call ``load_view`` and ``read_part``; the uploader holds a ``ManifestWriter``.
Chunks never change, so a ``ChunkReader`` keeps the recently read ones decoded.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tierlog.storage.tier.layout import manifest_key, manifest_prefix, parse_manifest_version
from tierlog.storage.tier.manifest import (
    ChunkRef,
    CorruptManifestError,
    FencedWriterError,
    ManifestChange,
    ManifestEntry,
    ManifestVanishedError,
    PartitionManifest,
    RemoteLogView,
    RemoteSegment,
    SegmentPart,
)
from tierlog.storage.tier.manifest_chunks import CHUNK_ENTRIES, seal
from tierlog.storage.tier.manifest_codec import decode_chunk, decode_manifest, encode_manifest
from tierlog.storage.tier.store import (
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectStore,
    ObjectStoreError,
)
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "ChunkReader",
    "ManifestWriter",
    "ReadableManifest",
    "load_manifest",
    "load_readable_manifest",
    "load_view",
    "read_part",
]

log = logging.getLogger(__name__)

VERSIONS_TO_KEEP = 3
_LOAD_ATTEMPTS = 5  # a version pruned between our list and get: list again
_REBASE_ATTEMPTS = 10
CHUNKS_KEPT = 256  # decoded chunks a reader's ChunkReader keeps (each CHUNK_ENTRIES entries)
# A writer reads chunks front to back (retention, deletion, the sweep in key order): a
# few paths' worth is enough, and there is one writer per partition.
WRITER_CHUNKS_KEPT = 16


def load_manifest(store: ObjectStore, tp: TopicPartition) -> PartitionManifest:
    """The newest manifest version, or the empty version 0 when none was written;
    ``CorruptManifestError`` when the newest head does not decode. What writers build
    on: that head is the latest committed change, and may be the only record of an
    upload, a deletion or a newer writer epoch (the fence)."""
    readable = load_readable_manifest(store, tp)
    if readable.garbled:
        raise readable.garbled[0]
    return readable.manifest


@dataclass(frozen=True)
class ReadableManifest:
    """What a reader may serve from: the newest head that decodes, and the errors of
    the newer heads that do not (newest first; empty when the newest head is fine)."""

    manifest: PartitionManifest
    garbled: tuple[CorruptManifestError, ...] = ()


def load_readable_manifest(
    store: ObjectStore, tp: TopicPartition, known: PartitionManifest | None = None
) -> ReadableManifest:
    """The newest head that decodes, for readers: a garbled newest head leaves the older
    kept ones (``VERSIONS_TO_KEEP``) to serve from. ``CorruptManifestError`` (the
    newest's) when none decodes. ``known``: a version read before, taken as it is when
    the listing finds it still the one to serve (a head is never rewritten: its key is
    its version, written once), so an unchanged manifest costs the listing alone."""
    for _attempt in range(_LOAD_ATTEMPTS):
        garbled: list[CorruptManifestError] = []
        try:
            for version in reversed(_stored_versions(store, tp)):
                if known is not None and known.version == version:
                    return ReadableManifest(known, tuple(garbled))
                try:
                    return ReadableManifest(_load_head(store, tp, version), tuple(garbled))
                except CorruptManifestError as error:
                    garbled.append(error)
        except ObjectNotFoundError:
            continue  # pruned between the listing and the get: list again
        if garbled:
            raise garbled[0]
        return ReadableManifest(PartitionManifest(tp))
    raise ObjectNotFoundError(f"{tp}: manifest versions kept disappearing while loading")


def _load_head(store: ObjectStore, tp: TopicPartition, version: int) -> PartitionManifest:
    key = manifest_key(tp, version)
    try:
        manifest = decode_manifest(store.get(key))
    except CorruptManifestError as error:
        raise CorruptManifestError(f"{key}: {error}") from error
    if manifest.tp != tp or manifest.version != version:
        raise CorruptManifestError(f"{key} describes {manifest.tp} version {manifest.version}")
    return manifest


def load_view(
    store: ObjectStore, tp: TopicPartition, chunks: ChunkReader | None = None
) -> RemoteLogView:
    """What a reader may serve of ``tp`` from the tier right now; its lookups read the
    chunks they need through ``chunks`` (a fresh ``ChunkReader`` when not given)."""
    return load_manifest(store, tp).view(chunks or ChunkReader(store))


class ChunkReader:
    """Reads and decodes chunks, keeping the most recently used (thread-safe). Chunks
    are immutable, so a kept one is never stale; a deleted one raises
    ``ObjectNotFoundError`` when read again."""

    def __init__(self, store: ObjectStore, max_chunks: int = CHUNKS_KEPT):
        self.store = store
        self.max_chunks = max_chunks
        self.reads = 0  # chunk GETs so far (for tests and benchmarks)
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, tuple[ManifestEntry, ...]] = OrderedDict()

    def __call__(self, ref: ChunkRef) -> Sequence[ManifestEntry]:
        with self._lock:
            found = self._kept.get(ref.key)
            if found is not None:
                self._kept.move_to_end(ref.key)
                return found
        entries = decode_chunk(self.store.get(ref.key), ref)
        with self._lock:
            self.reads += 1
            self._kept[ref.key] = entries
            while len(self._kept) > self.max_chunks:
                self._kept.popitem(last=False)
        return entries


def read_part(
    store: ObjectStore,
    segment: RemoteSegment,
    part: SegmentPart,
    start: int = 0,
    end: int | None = None,
) -> bytes:
    """Bytes ``[start, end)`` of one part of a segment object (offsets within the part;
    ``end=None`` reads to the part's end), in one ranged GET."""
    whole = segment.range_of(part)
    stop = whole.length if end is None else min(end, whole.length)
    if not 0 <= start <= stop:
        raise ValueError(f"range [{start}, {end}) lies outside the {part.value} part")
    if start == stop:
        return b""
    return store.get(segment.key, whole.start + start, whole.start + stop)


def _stored_versions(store: ObjectStore, tp: TopicPartition) -> list[int]:
    found = (parse_manifest_version(info.key) for info in store.list(manifest_prefix(tp)))
    return sorted(version for version in found if version is not None)


class ManifestWriter:
    """One owner's handle on a partition's manifest: every change it commits carries
    its writer epoch and id, and fails with ``FencedWriterError`` once deposed."""

    def __init__(
        self,
        store: ObjectStore,
        manifest: PartitionManifest,
        writer_id: str,
        *,
        chunk_entries: int = CHUNK_ENTRIES,
        on_change: Callable[[PartitionManifest], None] | None = None,
    ):
        self.store = store
        self.manifest = manifest
        self.writer_id = writer_id
        self.writer_epoch = manifest.writer_epoch
        self.chunk_entries = chunk_entries
        self.chunks = ChunkReader(store, WRITER_CHUNKS_KEPT)
        self.on_change = on_change  # given every version this writer stores, once stored

    @property
    def tp(self) -> TopicPartition:
        return self.manifest.tp

    @classmethod
    def claim(
        cls,
        store: ObjectStore,
        tp: TopicPartition,
        writer_id: str,
        *,
        min_epoch: int = 0,
        chunk_entries: int = CHUNK_ENTRIES,
        on_change: Callable[[PartitionManifest], None] | None = None,
    ) -> ManifestWriter:
        """Become the partition's tier writer with an epoch above every earlier one.

        Writing a version with the new epoch deposes any earlier owner: its next
        change meets this version and is fenced."""
        current = load_manifest(store, tp)
        epoch = max(current.writer_epoch + 1, min_epoch)
        writer = cls(store, current, writer_id, chunk_entries=chunk_entries, on_change=on_change)
        writer.writer_epoch = epoch
        writer.update(lambda manifest: manifest)
        return writer

    def update(self, change: ManifestChange) -> PartitionManifest:
        """Apply ``change`` to the newest manifest and store the result as the next version."""
        base = self.manifest
        for _attempt in range(_REBASE_ATTEMPTS):
            self._check_not_fenced(base)
            if not self._still_stored(base):
                base = self._newer_than(base)
                continue
            changed, sealed = seal(
                dataclasses.replace(
                    change(base),
                    version=base.version + 1,
                    writer_epoch=self.writer_epoch,
                    writer_id=self.writer_id,
                ),
                self.chunk_entries,
            )
            for chunk in sealed:
                self.store.put(chunk.ref.key, chunk.body)
            body = encode_manifest(changed)
            key = manifest_key(self.tp, changed.version)
            try:
                self.store.put(key, body, if_absent=True)
            except ObjectExistsError:
                if self._is_ours(key, body):
                    break
                base = load_manifest(self.store, self.tp)
                continue
            break
        else:
            raise FencedWriterError(f"{self.tp}: lost {_REBASE_ATTEMPTS} manifest races in a row")
        self.manifest = changed
        if self.on_change is not None:
            self.on_change(changed)
        self._prune_old_versions(changed.version)
        return changed

    def view(self) -> RemoteLogView:
        """The view of the manifest as this writer last stored or read it."""
        return self.manifest.view(self.chunks)

    def refresh(self) -> PartitionManifest:
        """Reload the newest version (and fail if another writer took over, or if the
        stored versions went back: the manifest vanished). A newest head that no longer
        decodes but is the version this writer holds is written again as the next
        version, superseding it: its content is known here and nowhere else."""
        try:
            latest = load_manifest(self.store, self.tp)
        except CorruptManifestError as error:
            if _stored_versions(self.store, self.tp)[-1:] != [self.manifest.version]:
                raise
            log.error(
                "%s: %s; this writer holds that version and writes it again as the next",
                self.tp,
                error,
            )
            return self.update(lambda manifest: manifest)
        if latest.version < self.manifest.version:
            raise self._vanished(latest)
        self._check_not_fenced(latest)
        self.manifest = latest
        return latest

    def _still_stored(self, base: PartitionManifest) -> bool:
        """Whether the version a change builds on is still in the store (one HEAD).

        The next version is written only if absent, which guards against a racing
        writer but not against a store that lost every version: an emptied or
        recreated bucket would take the next version, built from memory, naming
        segments whose objects are gone."""
        if base.version == 0:
            return True  # never written: the if-absent put of version 1 is the guard
        try:
            self.store.size(manifest_key(self.tp, base.version))
        except ObjectNotFoundError:
            return False
        return True

    def _newer_than(self, base: PartitionManifest) -> PartitionManifest:
        """The newest version, when ``base`` was pruned by a writer that moved past it
        (the caller's fencing check then decides); ``ManifestVanishedError`` when the
        store holds nothing newer: the manifest is gone."""
        latest = load_manifest(self.store, self.tp)
        if latest.version <= base.version:
            raise self._vanished(latest)
        return latest

    def _vanished(self, latest: PartitionManifest) -> ManifestVanishedError:
        found = f"version {latest.version}" if latest.version else "no version"
        return ManifestVanishedError(
            f"{self.tp}: manifest version {self.manifest.version} is gone from "
            f"{self.store.url} ({found} there): the bucket was emptied or replaced"
        )

    def _check_not_fenced(self, latest: PartitionManifest) -> None:
        newer = latest.writer_epoch > self.writer_epoch
        twin = latest.writer_epoch == self.writer_epoch and latest.writer_id != self.writer_id
        if newer or (twin and latest.version > 0):
            raise FencedWriterError(
                f"{self.tp}: writer epoch {self.writer_epoch} was deposed by epoch "
                f"{latest.writer_epoch} ({latest.writer_id}) at manifest version {latest.version}"
            )

    def _is_ours(self, key: str, body: bytes) -> bool:
        """Whether an earlier, ambiguous attempt of this very put landed."""
        try:
            return self.store.get(key) == body
        except ObjectNotFoundError:
            return False

    def _prune_old_versions(self, newest: int) -> None:
        try:
            doomed = [
                v for v in _stored_versions(self.store, self.tp) if v <= newest - VERSIONS_TO_KEEP
            ]
            self.store.delete(manifest_key(self.tp, version) for version in doomed)
        except ObjectStoreError as error:
            log.warning("%s: old manifest versions stay for now: %s", self.tp, error)
