"""One upload attempt of a closed segment, two-phase under a fresh id, and the sweep
that removes what failed attempts left behind.

An attempt: gather the segment's object (``segment_object``), record a ``started``
manifest entry naming its key, PUT the object, mark the entry ``finished``. Readers
only ever see finished entries, so a failed attempt leaves nothing readable. When an
attempt fails it cleans up at once if it can (entry still ``started``: abort its
multipart upload, delete the object, then drop the entry); what it cannot clean (the
store is down) the sweep removes later:

- ``started`` entries older than the abandon timeout (a crashed or deposed writer's,
  or one whose clean-up failed): object deleted, then entry dropped;
- objects under the partition's ``segments/`` prefix that no manifest entry names and
  that are older than the timeout (their entry was dropped, or deletion passed it, but
  the delete failed);
- manifest chunks no head reaches any more that are older than the timeout (sealed by
  a change that was lost, or forgotten by deletion before their delete landed);
- the incomplete multipart uploads of the abandoned ``started`` entries' keys, asked
  by full key (the only way MinIO finds one left before it restarted). Uploads no
  entry names are swept for the whole store at once (``RemoteLogManager``).

An ambiguous failure (the ``finished`` change may have landed) is settled by
reading the manifest again before cleaning up: a finished entry is kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tierlog.storage.errors import TierlogError
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.layout import (
    chunks_prefix,
    new_segment_id,
    segment_key,
    segments_prefix,
)
from tierlog.storage.tier.manifest import FencedWriterError, RemoteSegment, SegmentState
from tierlog.storage.tier.manifest_chunks import names_segment, referenced_chunks
from tierlog.storage.tier.manifest_store import ManifestWriter
from tierlog.storage.tier.observer import TierObserver
from tierlog.storage.tier.segment_object import SegmentObject, segment_object

__all__ = ["SweepResult", "new_entry", "sweep_abandoned_uploads", "upload_segment"]

log = logging.getLogger(__name__)


def upload_segment(
    writer: ManifestWriter,
    segment: LogSegment,
    *,
    clock_ms: Callable[[], int],
    observer: TierObserver | None = None,
) -> RemoteSegment:
    """Upload one closed, flushed segment; returns its finished manifest entry.

    Raises the store's or the manifest's error when the attempt failed (after cleaning
    up what it could), ``FencedWriterError`` when another writer took over."""
    observer = observer or TierObserver()
    tp, store = writer.tp, writer.store
    content = segment_object(segment)
    entry = new_entry(writer, content, SegmentState.STARTED, clock_ms())
    segment_id = entry.segment_id
    writer.update(lambda manifest: manifest.start_upload(entry))
    observer.upload_started(tp, content.size_bytes)
    began = time.monotonic()
    try:
        store.put(entry.key, content.body)
        writer.update(lambda manifest: manifest.finish_upload(segment_id))
    except FencedWriterError:
        observer.upload_failed(tp, FencedWriterError.reason)
        raise
    except TierlogError as error:
        observer.upload_failed(tp, error.reason)
        finished = _clean_up_failed_attempt(writer, entry)
        if finished is None:
            raise
        log.info("%s: upload %s landed after all", tp, segment_id)
        return finished
    observer.segment_uploaded(tp, content.size_bytes, time.monotonic() - began)
    return writer.manifest.segment(segment_id)


def new_entry(
    writer: ManifestWriter, content: SegmentObject, state: SegmentState, created_ms: int
) -> RemoteSegment:
    """The manifest entry of ``content`` under a fresh id and key of ``writer``'s epoch."""
    segment_id = new_segment_id()
    return RemoteSegment(
        segment_id=segment_id,
        writer_epoch=writer.writer_epoch,
        state=state,
        base_offset=content.base_offset,
        end_offset=content.end_offset,
        base_timestamp=content.base_timestamp,
        max_timestamp=content.max_timestamp,
        offset_of_max_timestamp=content.offset_of_max_timestamp,
        key=segment_key(writer.tp, content.base_offset, writer.writer_epoch, segment_id),
        parts=content.parts,
        created_ms=created_ms,
    )


def _clean_up_failed_attempt(writer: ManifestWriter, entry: RemoteSegment) -> RemoteSegment | None:
    """Remove a failed attempt's object and entry, unless it finished after all (then
    return its entry). Failures here are left to the sweep."""
    try:
        current = writer.refresh().segment(entry.segment_id)
        if current.state is SegmentState.FINISHED:
            return current
        writer.store.abort_incomplete_uploads(entry.key, older_than_s=0)
        writer.store.delete([entry.key])
        writer.update(lambda manifest: manifest.drop([entry.segment_id]))
    except FencedWriterError:
        raise
    except TierlogError as error:
        log.warning("%s: upload %s is left for the sweep: %s", writer.tp, entry.segment_id, error)
    return None


class SweepResult:
    """What a sweep took out of the manifest, for the deletion metrics."""

    def __init__(self) -> None:
        self.abandoned_entries = 0
        self.size_bytes = 0


def sweep_abandoned_uploads(
    writer: ManifestWriter, *, now_ms: int, abandon_after_ms: int
) -> SweepResult:
    """Remove leftovers of attempts older than ``abandon_after_ms`` (see the module doc)."""
    result = SweepResult()
    store, tp = writer.store, writer.tp
    manifest = writer.refresh()
    stale = [
        s
        for s in manifest.in_state(SegmentState.STARTED)
        if now_ms - s.created_ms >= abandon_after_ms
    ]
    aborted = 0
    if stale:
        # Each by its full key first: MinIO finds an upload left before it restarted only
        # so (its bucket-wide listing lives in memory); the attempt is abandoned whatever
        # the upload's own age.
        aborted = sum(store.abort_incomplete_uploads(s.key, older_than_s=0) for s in stale)
        store.delete(s.key for s in stale)
        writer.update(lambda m: m.drop([s.segment_id for s in stale]))
        result.abandoned_entries = len(stale)
        result.size_bytes += sum(s.log_size_bytes for s in stale)
    manifest = writer.manifest
    deadline_s = (now_ms - abandon_after_ms) / 1000
    orphans = [
        info.key
        for info in store.list(segments_prefix(tp))
        if info.last_modified_s <= deadline_s
        and not names_segment(manifest, writer.chunks, info.key)
    ]
    referenced = referenced_chunks(manifest, writer.chunks)
    orphans += [
        info.key
        for info in store.list(chunks_prefix(tp))
        if info.last_modified_s <= deadline_s and info.key not in referenced
    ]
    if orphans:
        store.delete(orphans)
    if stale or orphans:
        log.info(
            "%s: swept %d abandoned uploads (%d multipart uploads aborted) and %d orphaned objects",
            tp,
            len(stale),
            aborted,
            len(orphans),
        )
    return result
