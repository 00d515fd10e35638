from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.storage.tier.faults import FaultyStore
from tests.storage.tier.test_manifest import remote_segment
from tests.storage.tier.tiering import STORE_KINDS, both_stores
from tierlog.storage.tier.layout import chunks_prefix, manifest_key, manifest_prefix
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest import (
    CorruptManifestError,
    FencedWriterError,
    ManifestChange,
    ManifestVanishedError,
    PartitionManifest,
    RemoteSegment,
    SegmentPart,
    SegmentState,
    part_ranges,
)
from tierlog.storage.tier.manifest_chunks import CHUNK_ENTRIES, dead_objects
from tierlog.storage.tier.manifest_codec import encode_manifest
from tierlog.storage.tier.manifest_store import (
    VERSIONS_TO_KEEP,
    ManifestWriter,
    load_manifest,
    load_readable_manifest,
    load_view,
    read_part,
)
from tierlog.storage.tier.store import Body, ObjectStore, ObjectStoreUnavailableError
from tierlog.storage.topic_partition import TopicPartition

TP = TopicPartition("orders", 2)


@pytest.fixture
def store(tmp_path: Path) -> LocalDirectoryStore:
    return LocalDirectoryStore(tmp_path / "tier")


def versions(store: LocalDirectoryStore) -> list[str]:
    return [info.key.rsplit("/", 1)[-1] for info in store.list(manifest_prefix(TP))]


def test_a_partition_never_written_loads_empty(store: LocalDirectoryStore) -> None:
    assert load_manifest(store, TP) == PartitionManifest(TP)
    view = load_view(store, TP)
    assert (view.log_start_offset, view.end_offset, view.all_segments()) == (0, 0, ())


def test_each_change_is_a_new_version_and_old_ones_are_pruned(
    store: LocalDirectoryStore,
) -> None:
    writer = ManifestWriter.claim(store, TP, "w1")
    for offset in range(1, 8):
        writer.update(lambda m, offset=offset: m.advance_log_start(offset))  # type: ignore[misc]
    loaded = load_manifest(store, TP)
    assert loaded == writer.manifest
    assert (loaded.version, loaded.log_start_offset, loaded.writer_epoch) == (8, 7, 1)
    assert len(versions(store)) == VERSIONS_TO_KEEP


def test_a_new_owner_fences_the_old_one(store: LocalDirectoryStore) -> None:
    old = ManifestWriter.claim(store, TP, "old-pod")
    old.update(lambda m: m.advance_log_start(5))
    new = ManifestWriter.claim(store, TP, "new-pod")
    assert new.writer_epoch == old.writer_epoch + 1
    with pytest.raises(FencedWriterError):
        old.update(lambda m: m.advance_log_start(9))
    with pytest.raises(FencedWriterError):
        old.refresh()
    assert load_manifest(store, TP).log_start_offset == 5
    new.update(lambda m: m.advance_log_start(9))
    assert load_manifest(store, TP).writer_id == "new-pod"


def test_an_older_writers_late_version_is_built_upon_not_lost(
    store: LocalDirectoryStore,
) -> None:
    old = ManifestWriter.claim(store, TP, "old-pod")
    # The new owner loads version 1, then the old owner writes version 2 before the
    # new owner's claim lands: the claim meets version 2 and is re-applied on top.
    new = ManifestWriter(store, load_manifest(store, TP), "new-pod")
    new.writer_epoch = old.writer_epoch + 1
    segment = remote_segment(0, 10)
    old.update(lambda m: m.start_upload(segment))
    new.update(lambda m: m.advance_log_start(3))
    latest = load_manifest(store, TP)
    assert (latest.version, latest.writer_id, latest.log_start_offset) == (3, "new-pod", 3)
    assert [s.segment_id for s in latest.segments] == [segment.segment_id]
    with pytest.raises(FencedWriterError):
        old.update(lambda m: m.advance_log_start(4))


def test_an_ambiguous_put_that_landed_counts_as_done(store: LocalDirectoryStore) -> None:
    faulty = FaultyStore(store)
    writer = ManifestWriter.claim(faulty, TP, "w1")
    faulty.fail(lambda op, key: op == "put", after=True)
    with pytest.raises(ObjectStoreUnavailableError):
        writer.update(lambda m: m.advance_log_start(4))
    assert writer.manifest.log_start_offset == 0  # the writer does not know it landed
    writer.update(lambda m: m.advance_log_start(4))  # the retry finds its own bytes
    assert load_manifest(store, TP).log_start_offset == 4
    assert writer.manifest.version == load_manifest(store, TP).version


def test_a_change_after_an_ambiguous_put_applies_on_top(store: LocalDirectoryStore) -> None:
    faulty = FaultyStore(store)
    writer = ManifestWriter.claim(faulty, TP, "w1")
    faulty.fail(lambda op, key: op == "put", after=True)
    with pytest.raises(ObjectStoreUnavailableError):
        writer.update(lambda m: m.advance_log_start(4))
    writer.update(lambda m: m.advance_log_start(2))  # a different change: rebased
    assert load_manifest(store, TP).log_start_offset == 4


def test_a_manifest_under_the_wrong_key_is_corrupt(store: LocalDirectoryStore) -> None:
    store.put(manifest_key(TP, 1), encode_manifest(PartitionManifest(TP, version=2)))
    with pytest.raises(CorruptManifestError):
        load_manifest(store, TP)


def test_read_part_reads_ranges_within_one_part(store: LocalDirectoryStore) -> None:
    segment = remote_segment(0, 10)
    lengths = {SegmentPart.LOG: 6, SegmentPart.OFFSET_INDEX: 4, SegmentPart.TIME_INDEX: 3}
    segment = segment.__class__(**{**segment.__dict__, "parts": part_ranges(lengths)})
    store.put(segment.key, b"LOGLOG" + b"OIDX" + b"TIX")
    assert read_part(store, segment, SegmentPart.LOG) == b"LOGLOG"
    assert read_part(store, segment, SegmentPart.LOG, 2, 4) == b"GL"
    assert read_part(store, segment, SegmentPart.OFFSET_INDEX) == b"OIDX"
    assert read_part(store, segment, SegmentPart.TIME_INDEX, 1) == b"IX"
    assert read_part(store, segment, SegmentPart.PRODUCER_SNAPSHOT) == b""
    with pytest.raises(ValueError):
        read_part(store, segment, SegmentPart.LOG, 7)


def test_view_loads_finished_segments_from_the_store(store: LocalDirectoryStore) -> None:
    writer = ManifestWriter.claim(store, TP, "w1")
    done, pending = remote_segment(0, 10), remote_segment(10, 20)
    writer.update(lambda m: m.start_upload(done))
    writer.update(lambda m: m.finish_upload(done.segment_id).start_upload(pending))
    view = load_view(store, TP)
    assert [s.segment_id for s in view.all_segments()] == [done.segment_id]
    assert view.all_segments()[0].state is SegmentState.FINISHED and view.end_offset == 10


class RecordingStore(LocalDirectoryStore):
    """The local-directory store, noting the size of every object put."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.puts: list[tuple[str, int]] = []

    def put(self, key: str, body: Body, *, if_absent: bool = False) -> None:
        assert isinstance(body, bytes)
        self.puts.append((key, len(body)))
        super().put(key, body, if_absent=if_absent)


@pytest.mark.slow
def test_thousands_of_segments_keep_every_head_put_under_a_fixed_size(tmp_path: Path) -> None:
    store = RecordingStore(tmp_path / "tier")
    writer = ManifestWriter.claim(store, TP, "w1")
    for base in range(3000):
        segment = remote_segment(base, base + 1)
        writer.update(lambda m, s=segment: m.start_upload(s))  # type: ignore[misc]
        writer.update(lambda m, s=segment: m.finish_upload(s.segment_id))  # type: ignore[misc]
    heads = [size for key, size in store.puts if key.startswith(manifest_prefix(TP))]
    chunks = [size for key, size in store.puts if key.startswith(chunks_prefix(TP))]
    # A head holds fewer than 64 live entries (~420 B each) and 64 references (~230 B)
    # per chunk level; two levels here, a third from 64 * 64 * 32 segments on. The flat
    # format's last head would have held all 3000 entries (~1.2 MB).
    assert max(heads) < 64 * 1024
    assert max(ref.level for ref in writer.manifest.chunks) == 2
    assert len(chunks) < 3000 / CHUNK_ENTRIES * 1.1 and max(chunks) < 16 * 1024
    view = load_view(store, TP)
    assert [s.base_offset for s in view.all_segments()] == list(range(3000))
    assert view.segment_for_offset(1234) is not None
    assert view.segment_for_offset(1234).base_offset == 1234  # type: ignore[union-attr]


def test_a_tier_written_in_format_1_is_read_and_continued(store: LocalDirectoryStore) -> None:
    """Format 1 (before chunks): every live entry inline, ``deleting`` ones below the
    log start; a writer of format 2 claims it and deletes what was being deleted."""
    gone, kept = remote_segment(0, 10), remote_segment(10, 20)
    entries = [
        {**segment_entry(gone), "state": "deleting"},
        {**segment_entry(kept), "state": "finished"},
    ]
    document = {
        "format": 1, "topic": TP.topic, "partition": TP.partition, "version": 4,
        "writer_epoch": 2, "writer_id": "old-pod", "log_start_offset": 3, "segments": entries,
    }  # fmt: skip
    store.put(gone.key, b"x" * 100)
    store.put(manifest_key(TP, 4), json.dumps(document).encode())
    view = load_view(store, TP)
    assert [s.segment_id for s in view.all_segments()] == [kept.segment_id]
    assert (view.log_start_offset, view.end_offset) == (10, 20)
    writer = ManifestWriter.claim(store, TP, "new-pod")
    assert (writer.manifest.version, writer.writer_epoch) == (5, 3)
    dead = dead_objects(writer.manifest, writer.chunks)
    assert [s.segment_id for s in dead.segments] == [gone.segment_id]
    assert json.loads(store.get(manifest_key(TP, 5)))["format"] == 2
    later = remote_segment(20, 30)
    writer.update(lambda m: m.start_upload(later).finish_upload(later.segment_id))
    assert [s.base_offset for s in load_view(store, TP).all_segments()] == [10, 20]


def segment_entry(segment: RemoteSegment) -> dict[str, object]:
    encoded = json.loads(encode_manifest(PartitionManifest(TP, segments=(segment,))))
    entry = encoded["segments"][0]
    assert isinstance(entry, dict)
    return entry


def finished_upload(writer: ManifestWriter, base: int) -> None:
    segment = remote_segment(base, base + 1)
    writer.update(lambda m: m.start_upload(segment).finish_upload(segment.segment_id))


def test_an_ambiguous_put_that_sealed_a_chunk_counts_as_done(store: LocalDirectoryStore) -> None:
    faulty = FaultyStore(store)
    writer = ManifestWriter.claim(faulty, TP, "w1", chunk_entries=2)
    for base in range(3):
        finished_upload(writer, base)
    segment = remote_segment(3, 4)
    writer.update(lambda m: m.start_upload(segment))
    faulty.fail(lambda op, key: op == "put" and "/manifest/" in key, after=True)
    with pytest.raises(ObjectStoreUnavailableError):  # this change seals the first chunk
        writer.update(lambda m: m.finish_upload(segment.segment_id))
    assert writer.manifest.chunks == ()
    writer.update(lambda m: m.finish_upload(segment.segment_id))  # the same bytes: done
    stored = load_manifest(store, TP)
    assert stored == writer.manifest and len(stored.chunks) == 1
    assert [s.base_offset for s in load_view(store, TP).all_segments()] == [0, 1, 2, 3]
    assert [info.key for info in store.list(chunks_prefix(TP))] == [stored.chunks[0].key]


def test_a_deposed_writer_with_chunks_is_fenced_and_the_new_one_builds_on_them(
    store: LocalDirectoryStore,
) -> None:
    old = ManifestWriter.claim(store, TP, "old-pod", chunk_entries=2)
    for base in range(6):
        finished_upload(old, base)
    new = ManifestWriter.claim(store, TP, "new-pod", chunk_entries=2)
    assert new.manifest.chunks == old.manifest.chunks != ()
    with pytest.raises(FencedWriterError):
        finished_upload(old, 6)
    for base in range(6, 12):
        finished_upload(new, base)
    view = load_view(store, TP)
    assert [s.base_offset for s in view.all_segments()] == list(range(12))
    assert view.segment_for_offset(7) is not None and view.segment_for_offset(7).base_offset == 7  # type: ignore[union-attr]


@pytest.fixture(params=STORE_KINDS)
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    yield from both_stores(request, tmp_path)


def start_upload(base: int) -> ManifestChange:
    """The change that starts the upload of a segment of ten offsets from ``base``."""
    segment = remote_segment(base, base + 10)
    return lambda manifest: manifest.start_upload(segment)


def test_a_writer_whose_manifest_vanished_writes_nothing_and_says_so(
    any_store: ObjectStore,
) -> None:
    """The bucket emptied under a writer (deleted and recreated): its next change must
    not store a version built from memory, naming objects that are gone."""
    writer = ManifestWriter.claim(any_store, TP, "w")
    for base in (0, 10):
        writer.update(start_upload(base))
    any_store.delete(info.key for info in list(any_store.list("")))
    with pytest.raises(ManifestVanishedError, match="emptied or replaced"):
        writer.update(lambda m: m.advance_log_start(5))
    with pytest.raises(ManifestVanishedError):
        writer.refresh()
    assert list(any_store.list(manifest_prefix(TP))) == []
    assert load_manifest(any_store, TP).version == 0


def test_a_base_pruned_by_a_newer_writer_is_fencing_not_a_vanished_manifest(
    store: LocalDirectoryStore,
) -> None:
    old = ManifestWriter.claim(store, TP, "old")
    new = ManifestWriter.claim(store, TP, "new")
    for base in range(0, 10 * (VERSIONS_TO_KEEP + 1), 10):
        new.update(start_upload(base))
    assert list(store.list(manifest_key(TP, old.manifest.version))) == []  # pruned
    with pytest.raises(FencedWriterError):
        old.update(lambda m: m.advance_log_start(5))


GARBLED = b'{"format": 2, "topic": "ord\x00\xff'  # a head cut short, bytes flipped


def test_a_reader_falls_back_to_the_newest_readable_head_and_is_told_which_is_garbled(
    any_store: ObjectStore,
) -> None:
    writer = ManifestWriter.claim(any_store, TP, "w")
    for base in (0, 10, 20):
        writer.update(start_upload(base))
    newest = writer.manifest.version
    any_store.put(manifest_key(TP, newest), GARBLED)

    readable = load_readable_manifest(any_store, TP)
    assert readable.manifest.version == newest - 1
    assert [s.base_offset for s in readable.manifest.segments] == [0, 10]
    (garbled,) = readable.garbled
    assert manifest_key(TP, newest) in str(garbled)
    with pytest.raises(CorruptManifestError, match=manifest_key(TP, newest)):
        load_manifest(any_store, TP)  # a writer's load: it must build on the newest head


def test_no_writer_builds_on_an_older_head_than_a_garbled_newest_one(
    any_store: ObjectStore,
) -> None:
    """The garbled head is the latest committed change, and may carry a newer writer
    epoch (the fence) or uploads and deletions only it records: a new owner's claim and
    a deposed owner's change refuse to write past it, and only the writer that stored
    it, which holds its content, writes the next version, superseding it."""
    deposed = ManifestWriter.claim(any_store, TP, "deposed")
    owner = ManifestWriter.claim(any_store, TP, "owner")
    owner.update(start_upload(0))
    any_store.put(manifest_key(TP, owner.manifest.version), GARBLED)
    stored = sorted(info.key for info in any_store.list(manifest_prefix(TP)))

    with pytest.raises(CorruptManifestError):
        ManifestWriter.claim(any_store, TP, "newcomer")
    with pytest.raises(CorruptManifestError):
        deposed.update(lambda m: m.advance_log_start(5))
    assert sorted(info.key for info in any_store.list(manifest_prefix(TP))) == stored

    owner.update(start_upload(10))
    latest = load_manifest(any_store, TP)
    assert latest == owner.manifest
    assert [s.base_offset for s in latest.segments] == [0, 10]
    assert load_readable_manifest(any_store, TP).garbled == ()


def test_a_reader_reloading_an_unchanged_manifest_only_lists_it(any_store: ObjectStore) -> None:
    writer = ManifestWriter.claim(any_store, TP, "w")
    writer.update(start_upload(0))
    reads = FaultyStore(any_store)  # the reader's requests, counted
    known = load_readable_manifest(reads, TP).manifest
    reads.calls.clear()
    assert load_readable_manifest(reads, TP, known).manifest is known
    assert reads.calls == [("list", manifest_prefix(TP))]
    writer.update(start_upload(10))  # changed: the newest head is read
    assert load_readable_manifest(reads, TP, known).manifest == writer.manifest
    any_store.put(manifest_key(TP, writer.manifest.version), GARBLED)
    reads.calls.clear()
    readable = load_readable_manifest(reads, TP, known)  # the newest that decodes is known
    assert (readable.manifest, len(readable.garbled)) == (known, 1)
    assert [operation for operation, _key in reads.calls] == ["list", "get"]


def test_every_head_garbled_is_a_storage_error_for_readers_too(any_store: ObjectStore) -> None:
    writer = ManifestWriter.claim(any_store, TP, "w")
    writer.update(start_upload(0))
    for info in list(any_store.list(manifest_prefix(TP))):
        any_store.put(info.key, GARBLED)
    with pytest.raises(CorruptManifestError, match=manifest_key(TP, writer.manifest.version)):
        load_readable_manifest(any_store, TP)


def test_the_writer_holding_a_garbled_head_writes_it_again_when_it_next_refreshes(
    any_store: ObjectStore,
) -> None:
    """A quiet partition's writer supersedes the head at its sweep's refresh, not only
    at its next upload: the garbled head's content is in its memory."""
    writer = ManifestWriter.claim(any_store, TP, "w")
    for base in (0, 10):
        writer.update(start_upload(base))
    held = writer.manifest
    any_store.put(manifest_key(TP, held.version), GARBLED)

    refreshed = writer.refresh()
    assert refreshed.version == held.version + 1
    assert refreshed == dataclasses.replace(held, version=held.version + 1)
    assert load_manifest(any_store, TP) == refreshed
