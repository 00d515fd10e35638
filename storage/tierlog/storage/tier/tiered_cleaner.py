"""The tier's cleaner: one compaction pass over a partition's tiered segments.

The same ``Cleaner`` rounds as the local log, over the tier's finished segments read
through the chunk cache (``RemoteSegmentRecords``), so the rules are the local
cleaner's by construction. A pass, for a partition whose tier is dirty enough
(``measure_tier``: ``min.cleanable.dirty.ratio``, ``min.compaction.lag.ms`` and
``max.compaction.lag.ms`` as the local cleaner reads them, over the tier's bytes):

1. maps the tier's dirty range ``[cleaner offset, first uncleanable)``;
2. rewrites each run of segments below the map's end into a cleaned segment in a
   scratch directory (trimmed indexes, the run's aborted transactions), and PUTs it
   as a **new** object: a fresh id under the writer's epoch, carrying the producer
   snapshot of the run's last segment and the leader epochs of the run;
3. swaps every cleaned segment in, and moves the manifest's cleaner offset to the
   map's end, in **one** fenced manifest change (``manifest_chunks.replace_segments``);
4. only then deletes the replaced objects.

A crash (or an error) before step 3 commits leaves the manifest as it was, naming the
old objects only: the new ones are orphans, which the sweep removes once they are
older than the abandon timeout (``uploader.sweep_abandoned_uploads``). After it
commits, the manifest names the new objects only: replaced objects a crash kept from
step 4 are orphans the next sweep removes. A reader holding a view from before the
swap meets a deleted object, reloads the view and reads the cleaned segment
(``RemoteLogReader``). Offsets never move, so the log's tiered end and log start stay.

A run of one segment that the round leaves unchanged keeps its object (no upload).
Transactional batches and markers are copied as they are, as locally. A pass draws what
it reads and writes from its ``Cleaner``'s throttle: the local cleaner's, which the
sidecar gives it (``log.cleaner.io.max.bytes.per.second`` bounds both together).

The cleaner keeps each partition's dirty bytes as last measured (at each pass of the
remote log manager, and again after a swap): the tier cleaner's lag, which the sidecar
reports at scrape time without reading the manifest.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tierlog.storage.cleaner import Cleaner, CleaningRound, SegmentSizes, group_by_size
from tierlog.storage.cleaner_manager import worth_cleaning
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import CorruptRecordError, TierlogError
from tierlog.storage.file_records import FileBatch, scan_batches
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.manifest import (
    RemoteLogView,
    RemoteSegment,
    SegmentPart,
    SegmentState,
)
from tierlog.storage.tier.manifest_chunks import Swap, replace_segments
from tierlog.storage.tier.manifest_store import ManifestWriter, read_part
from tierlog.storage.tier.observer import TierObserver
from tierlog.storage.tier.range_reader import RangeReader
from tierlog.storage.tier.remote_reader import check_tiered_batch
from tierlog.storage.tier.segment_object import (
    assemble_segment_object,
    decode_leader_epochs,
    epochs_covering,
)
from tierlog.storage.tier.uploader import new_entry
from tierlog.storage.topic_partition import TopicPartition
from tierlog.storage.transaction_index import decode_entries

__all__ = ["RemoteSegmentRecords", "TierCleaner", "TierDirt", "TierPass", "measure_tier"]

log = logging.getLogger(__name__)


class RemoteSegmentRecords:
    """A tiered segment as the cleaner reads it: its batches, each checked (CRC, offsets
    inside the segment) before the cleaner sees it, so damage is refused, never
    rewritten under a fresh CRC. Batches below ``from_offset`` are passed over: they
    belong to the segment before, which overlaps this one (a local segment that
    straddled the tier's end when it was uploaded)."""

    def __init__(self, ranges: RangeReader, segment: RemoteSegment, from_offset: int = 0):
        self.ranges = ranges
        self.segment = segment
        self.from_offset = from_offset
        self._log = segment.range_of(SegmentPart.LOG)

    @property
    def base_offset(self) -> int:
        return max(self.segment.base_offset, self.from_offset)

    @property
    def next_offset(self) -> int:
        return self.segment.end_offset

    @property
    def size(self) -> int:
        return self.segment.log_size_bytes

    def sizes(self) -> SegmentSizes:
        segment = self.segment
        return SegmentSizes(
            self.base_offset,
            self.next_offset,
            self.size,
            segment.range_of(SegmentPart.OFFSET_INDEX).length,
            segment.range_of(SegmentPart.TIME_INDEX).length,
        )

    def batches(self) -> Iterator[FileBatch]:
        segment, end = self.segment, 0
        for batch in scan_batches(self._read, 0, self.size):
            check_tiered_batch(segment, batch.buffer, batch.header)
            end = batch.end
            if batch.header.last_offset >= self.from_offset:
                yield batch
        if end != self.size:
            raise CorruptRecordError(
                f"{segment.key}: the log part ends in a torn batch at byte {end} of {self.size}"
            )

    def headers(self) -> Iterator[FileBatch]:
        return self.batches()  # a remote header costs a GET: read on, through the cache

    def _read(self, position: int, length: int) -> bytes:
        start = self._log.start + position
        return self.ranges.read(
            self.segment.key, start, start + length, self.segment.object_size_bytes
        )


@dataclass(frozen=True)
class TierDirt:
    """The tier's dirty range and whether it is worth a pass (the local rule)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool
    worth_cleaning: bool


def measure_tier(
    view: RemoteLogView, cleaner_offset: int, config: LogConfig, now_ms: int
) -> TierDirt:
    """The dirty range of the tier from the manifest's cleaner offset (the log start when
    that lies outside the tier), as ``cleaner_manager.cleanable_offsets`` measures a
    local log: ``min.compaction.lag.ms`` holds back the first segment with a record
    younger than it, ``max.compaction.lag.ms`` makes an old first dirty segment due.

    Clean bytes are counted from the view's top entries wholly below the first dirty
    offset (a chunk straddling it counts as dirty only for its dirty segments)."""
    first_dirty = cleaner_offset
    if not view.log_start_offset <= first_dirty <= view.end_offset:
        first_dirty = view.log_start_offset
    clean_bytes = sum(e.log_size_bytes for e in view.top if e.end_offset <= first_dirty)
    dirty = list(view.segments_from(first_dirty))
    first_uncleanable = view.end_offset
    if config.min_compaction_lag_ms > 0:
        young = [s for s in dirty if s.max_timestamp > now_ms - config.min_compaction_lag_ms]
        if young:
            first_uncleanable = young[0].base_offset
    first_uncleanable = max(first_uncleanable, first_dirty)
    needs_now = bool(dirty) and 0 < dirty[0].base_timestamp < now_ms - config.max_compaction_lag_ms
    cleanable = sum(s.log_size_bytes for s in dirty if s.base_offset < first_uncleanable)
    return TierDirt(
        first_dirty,
        first_uncleanable,
        clean_bytes,
        cleanable,
        needs_now,
        worth_cleaning(clean_bytes, cleanable, needs_now, config.min_cleanable_dirty_ratio),
    )


@dataclass(frozen=True)
class TierPass:
    """What one pass did to the tier (log bytes)."""

    end_offset: int  # the cleaner offset the swap recorded
    bytes_read: int  # from the tier: the map's and the rewrite's reads
    bytes_replaced: int  # of the segments swapped out
    bytes_written: int  # of the cleaned segments swapped in
    segments_replaced: int
    segments_written: int

    @property
    def bytes_removed(self) -> int:
        return self.bytes_replaced - self.bytes_written


class TierCleaner:
    """Cleans one partition's tier at a time (one offset map, one scratch directory)."""

    def __init__(
        self,
        cleaner: Cleaner,
        ranges: RangeReader,
        scratch_dir: Path,
        *,
        observer: TierObserver | None = None,
    ):
        self.cleaner = cleaner
        self.ranges = ranges
        self.scratch_dir = scratch_dir
        self.observer = observer or TierObserver()
        self.passes = 0
        self._busy = threading.Lock()
        self._dirty_bytes: dict[TopicPartition, int] = {}  # as last measured

    def clean_if_dirty(
        self,
        writer: ManifestWriter,
        config: LogConfig,
        now_ms: int,
        *,
        should_abort: Callable[[], bool] = lambda: False,
    ) -> TierPass | None:
        """A pass over ``writer``'s partition if its tier is worth one and no other
        partition's pass holds the cleaner (then the next pass of the remote log manager
        asks again); None when nothing was done."""
        dirt = self._measure(writer, config, now_ms)
        if not dirt.worth_cleaning or not self._busy.acquire(blocking=False):
            return None
        try:
            done = self.clean(writer, config, dirt, now_ms, should_abort=should_abort)
        finally:
            self._busy.release()
        self._measure(writer, config, now_ms)
        return done

    def dirty_bytes(self, tp: TopicPartition) -> int | None:
        """The log bytes of ``tp``'s tier not cleaned yet (its dirty range up to the
        first uncleanable offset), as last measured; None before any measure."""
        return self._dirty_bytes.get(tp)

    def _measure(self, writer: ManifestWriter, config: LogConfig, now_ms: int) -> TierDirt:
        dirt = measure_tier(writer.view(), writer.manifest.cleaner_offset, config, now_ms)
        self._dirty_bytes[writer.tp] = dirt.cleanable_bytes
        return dirt

    def clean(
        self,
        writer: ManifestWriter,
        config: LogConfig,
        dirt: TierDirt,
        now_ms: int,
        *,
        should_abort: Callable[[], bool] = lambda: False,
    ) -> TierPass:
        """One pass (see the module doc). Raises the store's or the manifest's error, or
        ``LogCleaningAbortedError``; the manifest then names what it named before."""
        tp = writer.tp
        sources = self._sources(writer.view())
        state = self.cleaner.plan_round(
            sources,
            dirt.first_dirty_offset,
            dirt.first_uncleanable_offset,
            now_ms=now_ms,
            delete_retention_ms=config.delete_retention_ms,
            should_abort=should_abort,
        )
        below = [source for source in sources if source.base_offset < state.end_offset]
        groups = group_by_size(
            below, RemoteSegmentRecords.sizes, config.segment_bytes, config.segment_index_bytes
        )
        scratch = self.scratch_dir / tp.dir_name
        shutil.rmtree(scratch, ignore_errors=True)  # an interrupted pass's leftovers
        scratch.mkdir(parents=True)
        swaps: list[Swap] = []
        try:
            for group in groups:
                entry = self._clean_group(writer, group, state, config, scratch, now_ms)
                if entry is not None:
                    swaps.append(Swap(tuple(source.segment for source in group), entry))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        end = state.end_offset
        writer.update(lambda m: replace_segments(m, writer.chunks, swaps, end))
        replaced = [segment for swap in swaps for segment in swap.replaced]
        written = [swap.cleaned for swap in swaps]
        self._delete_replaced(writer, replaced)
        result = TierPass(
            end,
            state.stats.map_bytes_read + state.stats.bytes_read,
            sum(segment.log_size_bytes for segment in replaced),
            sum(segment.log_size_bytes for segment in written),
            len(replaced),
            len(written),
        )
        self.passes += 1
        self.observer.tier_cleaned(
            tp, result.bytes_read, result.bytes_written, result.bytes_removed
        )
        log.info(
            "%s: cleaned the tier up to %d: %d segments (%d bytes) -> %d (%d bytes)",
            tp,
            end,
            result.segments_replaced,
            result.bytes_replaced,
            result.segments_written,
            result.bytes_written,
        )
        return result

    def _sources(self, view: RemoteLogView) -> list[RemoteSegmentRecords]:
        sources: list[RemoteSegmentRecords] = []
        end = 0
        for segment in view.segments_from(view.floor):
            sources.append(RemoteSegmentRecords(self.ranges, segment, end))
            end = max(end, segment.end_offset)
        return sources

    def _clean_group(
        self,
        writer: ManifestWriter,
        group: Sequence[RemoteSegmentRecords],
        state: CleaningRound,
        config: LogConfig,
        scratch: Path,
        now_ms: int,
    ) -> RemoteSegment | None:
        """Write and upload the cleaned segment of ``group``; None when the group is one
        segment the round leaves as it is."""
        stats = state.stats
        before = (stats.records_read - stats.records_retained, stats.batches_rewritten)
        before_empty = stats.batches_kept_empty
        cleaned = LogSegment(
            scratch,
            group[0].base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_bytes=config.segment_index_bytes,
            active=True,
        )
        try:
            store, segments = writer.store, [source.segment for source in group]
            aborted = [
                entry
                for segment in segments
                for entry in decode_entries(
                    read_part(store, segment, SegmentPart.TXN_INDEX), segment.key
                )
            ]
            self.cleaner.write_cleaned(group, cleaned, state, aborted)
            after = (stats.records_read - stats.records_retained, stats.batches_rewritten)
            if len(group) == 1 and after == before and stats.batches_kept_empty == before_empty:
                return None
            stats.segments_read += len(group)
            stats.segments_written += 1
            stats.bytes_written += cleaned.size
            content = assemble_segment_object(
                cleaned,
                read_part(store, segments[-1], SegmentPart.PRODUCER_SNAPSHOT),
                _leader_epochs(writer, segments, cleaned.base_offset, cleaned.next_offset),
            )
            entry = new_entry(writer, content, SegmentState.FINISHED, now_ms)
            store.put(entry.key, content.body)
            return entry
        finally:
            cleaned.delete()

    def _delete_replaced(self, writer: ManifestWriter, replaced: Sequence[RemoteSegment]) -> None:
        """Delete the replaced objects; one a failure keeps is an orphan for the sweep."""
        try:
            writer.store.delete(segment.key for segment in replaced)
        except TierlogError as error:
            log.warning("%s: replaced segment objects are left for the sweep: %s", writer.tp, error)


def _leader_epochs(
    writer: ManifestWriter, segments: Sequence[RemoteSegment], base: int, end: int
) -> list[tuple[int, int]]:
    """The epochs in force in ``[base, end)``, from the replaced segments' parts."""
    entries = sorted(
        {
            entry
            for segment in segments
            for entry in decode_leader_epochs(
                read_part(writer.store, segment, SegmentPart.LEADER_EPOCHS)
            )
        },
        key=lambda entry: entry[1],
    )
    return epochs_covering(entries, base, end)
