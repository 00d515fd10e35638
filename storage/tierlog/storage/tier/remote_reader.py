"""Reads of tiered offsets: the remote half of Fetch, ListOffsets and Subscribe.

One ``RemoteLogReader`` per object store, shared by every partition. It sees a
partition's tier through its manifest's view (finished segments at or above the
tier's log start) and caches that view, reloading it when it is older than
``view_ttl_s``, when a read asks for an offset past its end (more was uploaded), or
when a segment it names has gone (retention deleted it); a reload that lists the
version it has as still the newest keeps it (the listing alone). The remote log manager of
the same process hands it each manifest version it stores (``offer``), which becomes
the view as if just loaded: a partition led here is read without the listing and the
head's GET, two round trips before a cold read's first data GET. A stale view whose
reload fails (the store is away) is still served: its segments' chunks may be in the
cache.

Within a segment a read follows ``LogSegment.read``: the segment's offset index,
fetched through the chunk cache and searched with the broker's own
``offset_index_lookup``, gives a position at or before the batch holding the offset
(the indexes of recently read segments stay in memory too, a few MiB: each fetch
needs one, and they are tiny beside the log bytes, which are never held);
batch headers are walked from there; whole batches are returned, the first even when
it is larger than ``max_bytes``. Every batch returned or decoded is checked first: its
CRC and its offsets inside the segment's range (a CRC-32C over a batch costs about what
copying it does, and the tier is where bytes sit unwatched for months: a damaged batch
is never served). As locally, a read ends before the first damaged batch it reaches,
so a consumer gets every record before it; the read that starts at it is answered
``CORRUPT_MESSAGE`` naming the object and the offset. A segment with nothing at or
after the offset (the tail a cleaner emptied) hands over to the next one. An offset
past the tier's end of a partition with no manifest at all is an error, not an empty
answer: the log holds it as tiered, so the manifest vanished, and an empty answer
would skip a consumer over the lost offsets. So is an offset past the end of the view
when the newest manifest head does not decode and the view is the newest that does
(logged once at ERROR): the garbled head may be all that names what lies there.
Every byte comes through the ``RangeReader``: chunked ranged GETs, the disk cache,
prefetch. Headers are read where the chunks lie and the answer is the one copy made.
The aborted transactions of a range come from the segments' transaction index parts,
searched as the broker searches its local ``.txnindex`` files.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import NamedTuple, TypeVar

from tierlog.storage.errors import CorruptRecordError, OffsetOutOfRangeError, TierlogError
from tierlog.storage.index import offset_index_lookup, time_index_lookup
from tierlog.storage.records import (
    HEADER_READ_SIZE,
    BatchHeader,
    ReadableBuffer,
    crc_is_valid,
    decode_records,
    parse_header,
)
from tierlog.storage.segment import TimestampAndOffset
from tierlog.storage.tier.manifest import (
    CorruptManifestError,
    ManifestVanishedError,
    PartitionManifest,
    RemoteLogView,
    RemoteSegment,
    SegmentPart,
)
from tierlog.storage.tier.manifest_store import ChunkReader, load_readable_manifest
from tierlog.storage.tier.pieces import Pieces
from tierlog.storage.tier.range_reader import RangeReader
from tierlog.storage.tier.store import ObjectNotFoundError, ObjectStoreError
from tierlog.storage.topic_partition import TopicPartition
from tierlog.storage.transaction_index import AbortedTxn, collect_aborted, decode_entries

__all__ = ["RemoteLogReader", "check_tiered_batch"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# A walk reads this much beyond what it was asked for in one go: the bytes between the
# index entry and the wanted batch (about index.interval.bytes) and the next header.
_WINDOW_SLACK_BYTES = 16 * 1024
# The indexes of recently read segments kept in memory (offset and time index bytes).
INDEX_MEMORY_BYTES = 16 << 20


class _CachedView(NamedTuple):
    """A partition's view as last loaded, or offered (``offer``: which offer, else 0)."""

    loaded_at: float
    manifest: PartitionManifest
    view: RemoteLogView
    offer: int


class RemoteLogReader:
    """Reads tiered batches of any partition of one store; thread-safe."""

    def __init__(
        self,
        ranges: RangeReader,
        *,
        view_ttl_s: float = 5.0,
        clock_s: Callable[[], float] = time.monotonic,
    ):
        self.ranges = ranges
        self.store = ranges.store
        self.view_ttl_s = view_ttl_s
        self.clock_s = clock_s
        self.bytes_read = 0  # record bytes returned by ``read`` (a counter for metrics)
        self._lock = threading.Lock()
        self._views: dict[TopicPartition, _CachedView] = {}
        self._offers = 0  # views offered so far (``offer``)
        self._without_manifest: set[TopicPartition] = set()  # as last loaded
        self._garbled_heads: dict[TopicPartition, str] = {}  # as last loaded: why
        self._garbled_logged: set[str] = set()  # logged once each, not at every reload
        self._chunks = ChunkReader(self.store)  # the manifests' chunks, shared by the views
        self._indexes: OrderedDict[tuple[str, SegmentPart], bytes] = OrderedDict()
        self._index_bytes = 0

    # -- views --------------------------------------------------------------------------

    def view(self, tp: TopicPartition, *, refresh: bool = False) -> RemoteLogView:
        """The partition's tier as last loaded (loading it when stale or asked to)."""
        now = self.clock_s()
        with self._lock:
            cached = self._views.get(tp)
            offers_before = self._offers
        if cached is not None and not refresh and now - cached.loaded_at < self.view_ttl_s:
            return cached.view
        try:
            readable = load_readable_manifest(
                self.store, tp, cached.manifest if cached is not None else None
            )
        except ObjectStoreError:
            if cached is None or refresh:
                raise
            return cached.view  # the store is away: what was cached still names the segments
        manifest = readable.manifest
        if cached is not None and manifest is cached.manifest:
            fresh = cached.view  # the version it had: the listing was all it took
        else:
            fresh = manifest.view(self._chunks)
        garbled = str(readable.garbled[0]) if readable.garbled else ""
        with self._lock:
            offered = self._views.get(tp)
            if offered is not None and offered.offer > offers_before:
                # Stored by this process while this load was under way: newer than, or
                # the same as, what the load read; it stays.
                return offered.view
            self._views[tp] = _CachedView(now, manifest, fresh, 0)
            if manifest.version:
                self._without_manifest.discard(tp)
            else:
                self._without_manifest.add(tp)
            if garbled:
                self._garbled_heads[tp] = garbled
            else:
                self._garbled_heads.pop(tp, None)
            first_seen = garbled and garbled not in self._garbled_logged
            if first_seen:
                self._garbled_logged.add(garbled)
        if first_seen:
            logger.error(
                "%s: the newest tier manifest head is garbled (%s); reads are served from "
                "version %d, the newest that decodes, and offsets past its end %d answer "
                "KAFKA_STORAGE_ERROR until the head is restored or its writer supersedes it",
                tp,
                garbled,
                manifest.version,
                fresh.end_offset,
            )
        return fresh

    def _refuse_past_a_garbled_head(
        self, tp: TopicPartition, view: RemoteLogView, what: str
    ) -> None:
        """Past the end of a head older than a garbled newest one lies what only that
        head may name (its upload): a storage error, never an answer that the tier holds
        nothing there, which would move a reader on to the local log over it."""
        with self._lock:
            garbled = self._garbled_heads.get(tp)
        if garbled:
            raise CorruptManifestError(
                f"{tp}: {what} may lie past {view.end_offset}, the end of the newest "
                f"manifest head that decodes; the newest one does not: {garbled}"
            )

    def offer(self, manifest: PartitionManifest) -> None:
        """``manifest`` was just stored, by a writer of this process: the newest version
        (an if-absent put won it), which becomes the partition's view as if loaded now."""
        view = manifest.view(self._chunks)
        now = self.clock_s()
        with self._lock:
            self._offers += 1
            self._views[manifest.tp] = _CachedView(now, manifest, view, self._offers)
            self._without_manifest.discard(manifest.tp)
            self._garbled_heads.pop(manifest.tp, None)

    def invalidate(self, tp: TopicPartition) -> None:
        """The partition's manifest changed: the next call reloads it."""
        with self._lock:
            self._views.pop(tp, None)

    def _with_view(self, tp: TopicPartition, offset: int, act: Callable[[RemoteLogView], _T]) -> _T:
        """Run ``act`` on the view, again on a fresh one if a segment it named was gone."""
        view = self.view(tp)
        if offset >= view.end_offset:
            view = self.view(tp, refresh=True)
        try:
            return act(view)
        except ObjectNotFoundError:  # deleted by retention since the view was loaded
            return act(self.view(tp, refresh=True))

    # -- reads --------------------------------------------------------------------------

    def read(
        self, tp: TopicPartition, offset: int, max_bytes: int, *, min_one_batch: bool = True
    ) -> bytes:
        """Whole batches from the one holding ``offset``; ``b""`` at or past the tier's
        end. OffsetOutOfRangeError below the tier's log start."""

        def attempt(view: RemoteLogView) -> bytes:
            if offset < view.log_start_offset:
                raise OffsetOutOfRangeError(
                    f"{tp}: offset {offset} is below the tier's log start {view.log_start_offset}"
                )
            if offset >= view.end_offset:
                if tp in self._without_manifest:
                    # The log says the offset is tiered; an empty answer would skip the
                    # consumer to the local log start over data the tier lost.
                    raise ManifestVanishedError(
                        f"{tp}: offset {offset} lies in the tier, which has no manifest "
                        f"for the partition in {self.store.url}"
                    )
                self._refuse_past_a_garbled_head(tp, view, f"offset {offset}")
                return b""
            for segment in view.segments_from(offset):
                records = self._read_segment(segment, offset, max_bytes, min_one_batch)
                if records:
                    return records
            return b""

        records = self._with_view(tp, offset, attempt)
        with self._lock:
            self.bytes_read += len(records)
        return records

    def _read_segment(
        self, segment: RemoteSegment, offset: int, max_bytes: int, min_one_batch: bool
    ) -> bytes:
        """Whole batches from the one holding ``offset``, ending before the first damaged
        one: the batches before damage are an answer, as a local read's are, and the
        read that starts at the damaged batch is the one refused."""
        start = self._index_position(segment, offset)
        log = _SegmentLog(self.ranges, segment, max_bytes + _WINDOW_SLACK_BYTES)
        first, length = -1, 0
        # Each batch's place in the answer beside its header (positioned at 0, its own
        # bytes' start): a ``_replace`` per batch cost 1.7 ms of the 20.6 ms a 64 MiB
        # read spent walking its batches in memory.
        chosen: list[tuple[int, BatchHeader]] = []
        try:
            for position, header in log.headers(start):
                if first < 0:
                    if header.last_offset < offset:
                        continue
                    first = position
                if length + header.size > max_bytes and (length or not min_one_batch):
                    break
                chosen.append((length, header))
                length += header.size
        except CorruptRecordError:
            if not chosen:
                raise
        if not length:
            return b""
        records = log.read(first, first + length)
        answer = memoryview(records)
        for index, (position, header) in enumerate(chosen):
            batch = answer[position : position + header.size]
            if not index:
                check_tiered_batch(segment, batch, header)
            elif _damage_in(segment, batch, header):
                return records[:position]
        return records

    def _index_position(self, segment: RemoteSegment, offset: int) -> int:
        """Where to start walking for ``offset``: its offset index entry's position, and
        the log's first byte for an offset at or below the segment's base without
        waiting for the index (a reader crossing into the segment, a cold scan: its
        first bytes a round trip sooner), which is fetched meanwhile for the next read."""
        if offset <= segment.base_offset:
            self._index_soon(segment, SegmentPart.OFFSET_INDEX)
            return 0
        index = self._index(segment, SegmentPart.OFFSET_INDEX)
        position = offset_index_lookup(index, segment.base_offset, offset).value
        return position if 0 <= position < segment.log_size_bytes else 0

    def _index_soon(self, segment: RemoteSegment, part: SegmentPart) -> None:
        """Have a segment's index part fetched in the background unless it is in memory."""
        with self._lock:
            if (segment.key, part) in self._indexes:
                return
        where = segment.range_of(part)
        self.ranges.fetch_soon(segment.key, where.start, where.end, segment.object_size_bytes)

    def _index(self, segment: RemoteSegment, part: SegmentPart) -> bytes:
        """A segment's whole index part: from memory, else through the chunk cache."""
        name = (segment.key, part)
        with self._lock:
            found = self._indexes.get(name)
            if found is not None:
                self._indexes.move_to_end(name)
                return found
        where = segment.range_of(part)
        data = self.ranges.read(
            segment.key, where.start, where.end, segment.object_size_bytes, prefetch=False
        )
        with self._lock:
            if name not in self._indexes:
                self._indexes[name] = data
                self._index_bytes += len(data)
            while self._index_bytes > INDEX_MEMORY_BYTES and len(self._indexes) > 1:
                self._index_bytes -= len(self._indexes.popitem(last=False)[1])
        return data

    def collect_aborted_transactions(
        self, tp: TopicPartition, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``,
        from the transaction indexes of the tiered segment holding ``start_offset`` on."""

        def attempt(view: RemoteLogView) -> list[AbortedTxn]:
            indexes = (
                decode_entries(self._index(segment, SegmentPart.TXN_INDEX), segment.key)
                for segment in view.segments_from(start_offset)
            )
            return collect_aborted(indexes, start_offset, upper_bound_offset)

        return self._with_view(tp, start_offset, attempt)

    # -- offsets by time ----------------------------------------------------------------

    def offset_for_timestamp(
        self, tp: TopicPartition, timestamp: int, start_offset: int = 0
    ) -> TimestampAndOffset | None:
        """The first tiered record at or after ``start_offset`` whose timestamp is >=
        ``timestamp`` (None when the tier has none)."""

        def attempt(view: RemoteLogView) -> TimestampAndOffset | None:
            start = max(start_offset, view.log_start_offset)
            for segment in view.segments_from(start, min_max_timestamp=timestamp):
                found = self._find_by_timestamp(segment, timestamp, start)
                if found is not None:
                    return found
            self._refuse_past_a_garbled_head(tp, view, f"a record at or after {timestamp}")
            return None

        return self._with_view(tp, start_offset, attempt)

    def _find_by_timestamp(
        self, segment: RemoteSegment, timestamp: int, start_offset: int
    ) -> TimestampAndOffset | None:
        times = self._index(segment, SegmentPart.TIME_INDEX)
        indexed = time_index_lookup(times, segment.base_offset, timestamp)
        start = self._index_position(segment, max(indexed.value, start_offset))
        log = _SegmentLog(self.ranges, segment, _WINDOW_SLACK_BYTES)
        for position, header in log.headers(start):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            buffer, local = log.batch(position)
            for record in decode_records(buffer, local):
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    return TimestampAndOffset(record.timestamp, record.offset)
        return None

    def max_timestamp(self, tp: TopicPartition) -> TimestampAndOffset | None:
        """The tiered record with the largest timestamp (the first of equals), or None."""

        def attempt(view: RemoteLogView) -> TimestampAndOffset | None:
            self._refuse_past_a_garbled_head(tp, view, "the largest timestamp")
            holder = view.segment_with_max_timestamp()
            if holder is None or holder.max_timestamp < 0:
                return None
            target = holder.offset_of_max_timestamp
            log = _SegmentLog(self.ranges, holder, _WINDOW_SLACK_BYTES)
            for position, header in log.headers(self._index_position(holder, target)):
                if header.last_offset < target:
                    continue
                buffer, local = log.batch(position)
                for record in decode_records(buffer, local):
                    if record.timestamp == holder.max_timestamp:
                        return TimestampAndOffset(record.timestamp, record.offset)
                break
            return TimestampAndOffset(holder.max_timestamp, target)

        return self._with_view(tp, 0, attempt)


def check_tiered_batch(segment: RemoteSegment, buffer: ReadableBuffer, header: BatchHeader) -> None:
    """Refuse a batch whose bytes are not what was uploaded."""
    damage = _damage_in(segment, buffer, header)
    if damage:
        where = f"{segment.key}: the batch at offset {header.base_offset}"
        raise CorruptRecordError(f"{where} {damage}")


def _damage_in(segment: RemoteSegment, buffer: ReadableBuffer, header: BatchHeader) -> str:
    """How the batch differs from what was uploaded (its offsets out of the segment's
    range, its CRC wrong), or ``""`` when it is intact."""
    if not segment.base_offset <= header.base_offset <= header.last_offset < segment.end_offset:
        return (
            f"(to {header.last_offset}) lies outside the segment's "
            f"[{segment.base_offset}, {segment.end_offset})"
        )
    if not crc_is_valid(buffer, header):
        return "fails its CRC: the object is damaged"
    return ""


class _SegmentLog:
    """The log part of one remote segment, read in windows as a walk moves through it.

    Positions are within the log part (0 is its first batch), as the index stores them.
    A window is the chunks' views (``Pieces``); only what a caller keeps is copied.
    """

    def __init__(self, ranges: RangeReader, segment: RemoteSegment, window_bytes: int):
        self.ranges = ranges
        self.segment = segment
        self.base = segment.range_of(SegmentPart.LOG).start
        self.size = segment.log_size_bytes
        self.window_bytes = window_bytes
        self._window = Pieces(0, [])

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the log, from the current window when it holds them."""
        if self._window.holds(start, end):
            return self._window.join(start, end)
        return self._get(start, end).join(start, end)

    def _get(self, start: int, end: int) -> Pieces:
        segment, end = self.segment, min(end, self.size)  # never into the parts after the log
        pieces = self.ranges.read_pieces(
            segment.key, self.base + start, self.base + end, segment.object_size_bytes
        )
        return Pieces(start, pieces.views(pieces.start, pieces.end))

    def _cover(self, start: int, end: int) -> None:
        """Make the window hold ``[start, end)`` (reading a new one from ``start``)."""
        if not self._window.holds(start, min(end, self.size)):
            self._window = self._get(start, max(end, start + self.window_bytes))

    def headers(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``position`` (a batch boundary) on."""
        while position < self.size:
            self._cover(position, position + HEADER_READ_SIZE)
            header = self._header(position)
            if position + header.size > self.size:
                raise self._damaged_at(
                    position,
                    f"it declares {header.size} bytes, the segment's log ends at {self.size}",
                )
            yield position, header
            position += header.size

    def _header(self, position: int) -> BatchHeader:
        """The header at ``position`` of the current window; garbage is a corrupt object."""
        buffer = self._window.contiguous(position, position + HEADER_READ_SIZE)
        try:
            return parse_header(buffer, 0)  # positioned within ``buffer``
        except TierlogError as error:
            raise self._damaged_at(position, f"no batch header: {error}") from None

    def _damaged_at(self, position: int, why: str) -> CorruptRecordError:
        """The batch at ``position`` (within the current window) is damaged. Its base
        offset leads the header, ahead of the length field a flip most often hits, so it
        names what a reader lost even when the rest is garbage."""
        claimed_bytes = self._window.contiguous(position, position + 8)
        claimed = int.from_bytes(claimed_bytes, "big", signed=True)
        return CorruptRecordError(
            f"{self.segment.key}: the batch at byte {position} of the log of the segment "
            f"from offset {self.segment.base_offset} (offset {claimed} by its header) is "
            f"damaged: {why}"
        )

    def batch(self, position: int) -> tuple[ReadableBuffer, BatchHeader]:
        """The whole batch at ``position`` as (buffer, its header within the buffer),
        checked (``check_tiered_batch``) before anything decodes it."""
        self._cover(position, position + HEADER_READ_SIZE)
        size = self._header(position).size
        self._cover(position, position + size)
        buffer = self._window.contiguous(position, position + size)
        header = parse_header(buffer, 0)
        check_tiered_batch(self.segment, buffer, header)
        return buffer, header
