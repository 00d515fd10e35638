"""Byte ranges of remote objects, read in chunks through the disk cache, with read-ahead.

A read of ``[start, end)`` of an object becomes the chunks that cover it: cached ones
come from the ``ChunkCache``, missing ones are ranged GETs of exactly one chunk each
(the first in the caller's thread, the others in parallel on the pool). Chunks travel
as views of the bytes they arrived in (a GET's answer, a cache file's), and a read
hands its caller those views (``read_pieces``): nothing is copied on the way, so a
reader copies only what it answers with.

Read-ahead adapts to the reader. A read that continues where an earlier one of the same
object ended (in the chunk it ended in, or the next) belongs to a sequential reader,
whose window of chunks fetched ahead doubles with each such read, from
``prefetch_chunks`` up to ``max_prefetch_chunks``; a read that starts anywhere else but
at the object's start (a random reader, an index lookup: ``prefetch=False``) gets none,
so random readers cost no GETs beyond their own. The window is topped up in ranged GETs
of up to ``READ_AHEAD_GET_BYTES`` (several chunks each, split into chunks for the cache),
only once a GET's worth of it is missing: a deep window is a few large GETs in flight,
which is what runs near the store's own throughput (a GET costs a round trip and, here,
a request's worth of client CPU, however small it is).

Chunks read ahead are used once: they wait in memory (``LANDED_MAX_BYTES`` over all
readers) until their reader takes them, and are not written to the disk cache. Writing
them cost as much CPU as fetching them (a file's new pages, measured at 0.4-1.2 ms per
MiB against 0.7 for the GET) and filled the cache with a scan that is read once; a
second reader of the same range fetches it again, in large GETs. Only a chunk that
memory pushes out unread goes to the disk cache, into its read-ahead share, which
random readers' chunks cannot evict, so a reader slower than memory allows still
finds its chunks there rather than fetching them twice.

One GET per chunk, whoever asks: a read that needs a chunk already being fetched (read
ahead or by another reader) waits for that fetch instead of issuing its own. A chunk a
reader waited for is handed to its readers first and written to the disk cache after
(on a busy or network-attached cache disk a write can take longer than the GET); its
fetch counts as in flight until the write is done.

Objects are immutable and their size is known from the tier's metadata, so no chunk
ever reads past an object's end (S3 refuses a range starting beyond it). A store that
returns fewer bytes than the metadata promises is an error, not a short read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from tierlog.storage.tier.chunk_cache import Chunk, ChunkCache
from tierlog.storage.tier.pieces import Pieces
from tierlog.storage.tier.store import ObjectStore, ObjectStoreError

__all__ = ["LANDED_MAX_BYTES", "READ_AHEAD_GET_BYTES", "FetchObserver", "RangeReader"]

log = logging.getLogger(__name__)

# Called after each remote GET with its latency and bytes (the sidecar's histogram),
# or with the error it raised and -1 bytes.
FetchObserver = Callable[[float, int, BaseException | None], None]

# The largest ranged GET read-ahead makes (at least one chunk).
READ_AHEAD_GET_BYTES = 8 << 20
# Sequential readers remembered, by object and the chunk each read last.
_STREAMS = 1024
# The chunks the latest reads ended in, and those read ahead that were read last, kept
# in memory: the next read of a sequential reader starts in the chunk its last one ended
# in (or a little before: an offset index entry), and reading that chunk from the disk
# cache again (and checking its CRC again) was half of a warm read's work; a chunk read
# ahead is not in the disk cache at all. Each may keep its GET's answer alive.
_TAILS = 16
# Chunks read ahead are also kept in memory until read, up to this many bytes over all
# readers (the oldest dropped first: still in the disk cache): a sequential reader
# takes them from there, neither reading the file back nor checking its CRC again.
# Each is a view of its GET's answer, which stays in memory until the last of its
# chunks is read or dropped (a sequential reader takes them in order).
LANDED_MAX_BYTES = 64 << 20


def _ignore(_seconds: float, _bytes: int, _error: BaseException | None) -> None:
    pass


class RangeReader:
    """Reads ranges of immutable objects of one store, through one cache; thread-safe."""

    def __init__(
        self,
        store: ObjectStore,
        cache: ChunkCache,
        *,
        prefetch_chunks: int = 2,
        max_prefetch_chunks: int = 32,
        threads: int = 4,
        on_fetch: FetchObserver = _ignore,
        read_ahead_memory_bytes: int = LANDED_MAX_BYTES,
    ):
        """``prefetch_chunks``: a sequential reader's first window (and the window of a
        read from an object's start), 0 for no read-ahead at all; ``max_prefetch_chunks``:
        its deepest; ``threads``: GETs in flight for read-ahead, and as many again for the
        chunks readers wait on; ``read_ahead_memory_bytes``: chunks read ahead held in
        memory until read, over all readers."""
        self.store = store
        self.cache = cache
        self.chunk_bytes = cache.chunk_bytes
        self.prefetch_chunks = max(prefetch_chunks, 0)
        self.max_prefetch_chunks = (
            max(max_prefetch_chunks, self.prefetch_chunks) if self.prefetch_chunks else 0
        )
        self.on_fetch = on_fetch
        self.read_ahead_memory_bytes = read_ahead_memory_bytes
        self._get_chunks = max(READ_AHEAD_GET_BYTES // self.chunk_bytes, 1)
        self._pool = ThreadPoolExecutor(max(threads, 1), thread_name_prefix="tier-fetch")
        self._ahead_pool = ThreadPoolExecutor(max(threads, 1), thread_name_prefix="tier-ahead")
        # Chunks a reader waited for go to the disk cache here, after the reader has them.
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="tier-cache-write")
        self._lock = threading.Lock()
        self._in_flight: dict[tuple[str, int], Future[Chunk]] = {}
        self._streams: OrderedDict[tuple[str, int], int] = OrderedDict()  # -> window depth
        self._tails: OrderedDict[tuple[str, int], Chunk] = OrderedDict()  # the last chunks read
        self._landed: OrderedDict[tuple[str, int], Chunk] = OrderedDict()  # read ahead, unread
        self._landed_bytes = 0  # of the GET answers the chunks in ``_landed`` keep alive
        self._landed_views: dict[int, int] = {}  # id of a GET's answer -> its chunks there
        self._closed = False

    def read(
        self, key: str, start: int, end: int, object_size: int, *, prefetch: bool = True
    ) -> bytes:
        """Bytes ``[start, end)`` of object ``key`` of ``object_size`` bytes (clipped to it);
        ``prefetch=False`` for reads that are not followed by the bytes after them
        (an index lookup)."""
        return self.read_pieces(key, start, end, object_size, prefetch=prefetch).join(start, end)

    def read_pieces(
        self, key: str, start: int, end: int, object_size: int, *, prefetch: bool = True
    ) -> Pieces:
        """As ``read``, the bytes as the chunks' views, uncopied."""
        end = min(end, object_size)
        if start >= end:
            return Pieces(start, [])
        chunk = self.chunk_bytes
        first, last = start // chunk, (end - 1) // chunk
        depth = self._window(key, first, last) if prefetch else 0
        pending = {i: self._fetching(key, i, object_size) for i in range(first + 1, last + 1)}
        pieces = [self.chunk(key, first, object_size)]
        pieces += [self._wait(key, i, object_size, pending[i]) for i in range(first + 1, last + 1)]
        if prefetch:
            self._keep_tail(key, last, pieces[-1])
        if depth:
            self._read_ahead(key, last + 1, depth, object_size)
        whole = Pieces(first * chunk, pieces)
        return Pieces(start, whole.views(start, end))

    def chunk(self, key: str, index: int, object_size: int) -> Chunk:
        """Chunk ``index`` of ``key``: from memory, the cache, a fetch in flight, or a GET
        here."""
        tail = self._tail(key, index)
        if tail is not None:
            return tail
        landed = self._take_landed(key, index)
        if landed is None:
            cached = self.cache.get(key, index)
            if cached is not None:
                return cached
            with self._lock:  # landed meanwhile (no longer in flight), in flight, or ours
                landed = self._take_landed_locked(key, index)
                running = self._in_flight.get((key, index))
                if landed is None and running is None:
                    mine: Future[Chunk] = Future()
                    self._in_flight[(key, index)] = mine
        if landed is not None:
            self.cache.found_in_memory(key, index, read_ahead=True)
            self._keep_tail(key, index, landed)
            return landed
        if running is not None:
            return self._taken(key, index, running)
        return self._fetch(key, index, object_size, mine)

    @property
    def read_ahead_memory_held_bytes(self) -> int:
        """Memory the chunks read ahead and not read yet keep alive (their GETs' answers)."""
        with self._lock:
            return self._landed_bytes

    def in_flight(self, key: str) -> list[int]:
        """The chunks of ``key`` being fetched, in order (for tests and benchmarks)."""
        with self._lock:
            return sorted(index for name, index in self._in_flight if name == key)

    # -- read-ahead ----------------------------------------------------------------------

    def _tail(self, key: str, index: int) -> Chunk | None:
        """A chunk a recent read ended in or took from read-ahead's memory."""
        with self._lock:
            tail = self._tails.get((key, index))
        if tail is not None:
            self.cache.found_in_memory(key, index)
        return tail

    def _keep_tail(self, key: str, index: int, data: Chunk) -> None:
        with self._lock:
            self._tails[(key, index)] = data
            self._tails.move_to_end((key, index))
            while len(self._tails) > _TAILS:
                self._tails.popitem(last=False)

    def _window(self, key: str, first: int, last: int) -> int:
        """How many chunks to keep fetched ahead of a read of chunks ``[first, last]``:
        deeper for a reader that continues an earlier read, none for one that jumped."""
        with self._lock:
            depth = None
            for ended in (first, first - 1, first + 1):
                depth = self._streams.pop((key, ended), None)
                if depth is not None:
                    break
            if depth is None:  # a new reader: sequential only when it starts at the start
                depth = self.prefetch_chunks if first == 0 else 0
            else:
                depth = min(max(2 * depth, self.prefetch_chunks), self.max_prefetch_chunks)
            self._streams[(key, last)] = depth
            while len(self._streams) > _STREAMS:
                self._streams.popitem(last=False)
            return depth

    def _read_ahead(self, key: str, from_index: int, depth: int, object_size: int) -> None:
        """Fetch the missing chunks of ``[from_index, from_index + depth)`` in ranged GETs
        of up to ``_get_chunks`` chunks; a short run at the window's far end waits until a
        GET's worth (or half the window) is missing, so GETs stay large."""
        chunks = -(-object_size // self.chunk_bytes)
        stop = min(from_index + depth, chunks)
        top_up = max(1, min(self._get_chunks, depth // 2))
        runs: list[list[int]] = [[]]
        with self._lock:
            if self._closed:
                return
            for index in range(from_index, stop):
                name = (key, index)
                if name in self._in_flight or name in self._landed or self.cache.contains(*name):
                    runs.append([])
                elif len(runs[-1]) == self._get_chunks:
                    runs.append([index])
                else:
                    runs[-1].append(index)
            if stop < chunks and len(runs[-1]) < top_up:
                runs.pop()
            futures: list[list[Future[Chunk]]] = []
            for run in runs:
                futures.append([Future() for _ in run])
                for index, future in zip(run, futures[-1], strict=True):
                    self._in_flight[(key, index)] = future
        for run, waiting in zip(runs, futures, strict=True):
            if run:
                self._ahead_pool.submit(self._fetch_run, key, run, object_size, waiting)

    def _fetch_run(
        self, key: str, run: list[int], object_size: int, futures: list[Future[Chunk]]
    ) -> None:
        """GET consecutive chunks in one ranged GET, keep them in memory until read, and
        hand each to whoever waits on it: as views of the GET's bytes, not copies."""
        chunk = self.chunk_bytes
        start = run[0] * chunk
        try:
            data = self._get(key, start, min((run[-1] + 1) * chunk, object_size))
        except BaseException as error:
            for index, future in zip(run, futures, strict=True):
                self._settle(key, index)
                future.set_exception(error)
            log.debug("read-ahead of %s chunks %d-%d failed: %s", key, run[0], run[-1], error)
            return
        view = memoryview(data)
        pieces = [view[i * chunk - start : (i + 1) * chunk - start] for i in run]
        pushed_out: list[tuple[tuple[str, int], Chunk]] = []
        for index, piece, future in zip(run, pieces, futures, strict=True):
            pushed_out += self._land(key, index, piece)
            future.set_result(piece)
        for (pushed_key, pushed_index), unread in pushed_out:
            self._spill(pushed_key, pushed_index, unread)

    def _store(self, key: str, index: int, data: Chunk) -> None:
        """Write a fetched chunk (already handed to its reader) to the disk cache; its
        fetch stays in flight until then, so no reader fetches it again meanwhile."""
        try:
            self.cache.put(key, index, data)
        finally:
            self._settle(key, index)

    def _land(self, key: str, index: int, data: Chunk) -> list[tuple[tuple[str, int], Chunk]]:
        """Keep a chunk read ahead in memory until read (its fetch is done: no longer in
        flight); the unread chunks it pushes out, oldest first, are returned to spill."""
        pushed_out: list[tuple[tuple[str, int], Chunk]] = []
        with self._lock:
            self._landed[(key, index)] = data
            self._count_landed_locked(data, 1)
            self._in_flight.pop((key, index), None)
            while self._landed_bytes > self.read_ahead_memory_bytes:
                name, old = self._landed.popitem(last=False)
                self._count_landed_locked(old, -1)
                done: Future[Chunk] = Future()
                done.set_result(old)
                self._in_flight.setdefault(name, done)  # found here while it is written
                pushed_out.append((name, old))
        return pushed_out

    def _spill(self, key: str, index: int, data: Chunk) -> None:
        """An unread chunk read ahead, pushed out of memory: into the disk cache's
        read-ahead share, where its reader finds it."""
        try:
            self.cache.put(key, index, data, read_ahead=True)
        finally:
            self._settle(key, index)

    def _fetching(self, key: str, index: int, object_size: int) -> Future[Chunk] | None:
        """Start a background fetch of a missing chunk (None when cached or in memory)."""
        if self.cache.contains(key, index):
            return None
        with self._lock:
            if (key, index) in self._in_flight:
                return self._in_flight[(key, index)]
            if self._closed or (key, index) in self._landed or (key, index) in self._tails:
                return None
            future: Future[Chunk] = Future()
            self._in_flight[(key, index)] = future
        self._pool.submit(self._fetch_quietly, key, index, object_size, future)
        return future

    def _wait(self, key: str, index: int, object_size: int, future: Future[Chunk] | None) -> Chunk:
        if future is None:  # cached when we looked (but maybe evicted since)
            return self.chunk(key, index, object_size)
        return self._taken(key, index, future)

    def _taken(self, key: str, index: int, future: Future[Chunk]) -> Chunk:
        """The chunk another fetch brings; a chunk read ahead is now read."""
        data = future.result()
        if self._take_landed(key, index) is not None:
            self.cache.found_in_memory(key, index, read_ahead=True)
            self._keep_tail(key, index, data)
        else:
            self.cache.mark_read(key, index)
        return data

    def _take_landed(self, key: str, index: int) -> Chunk | None:
        """A chunk read ahead, out of memory (it is read now)."""
        with self._lock:
            return self._take_landed_locked(key, index)

    def _take_landed_locked(self, key: str, index: int) -> Chunk | None:
        landed = self._landed.pop((key, index), None)
        if landed is not None:
            self._count_landed_locked(landed, -1)
        return landed

    def _count_landed_locked(self, data: Chunk, change: int) -> None:
        """Memory is what the chunks keep alive: a GET's whole answer while any of its
        chunks waits in memory, not the chunks' own lengths."""
        answer = data.obj if isinstance(data, memoryview) else data
        views = self._landed_views.get(id(answer), 0) + change
        if views == 0:
            del self._landed_views[id(answer)]
        else:
            self._landed_views[id(answer)] = views
        if views == 0 or views == change:  # the last one left, or the first arrived
            self._landed_bytes += change * len(answer)  # type: ignore[arg-type]

    def _fetch_quietly(self, key: str, index: int, object_size: int, future: Future[Chunk]) -> None:
        try:
            self._fetch(key, index, object_size, future)
        except Exception as error:  # whoever waits on the future gets it; a prefetch has no one
            log.debug("prefetch of %s chunk %d failed: %s", key, index, error)

    def _fetch(self, key: str, index: int, object_size: int, future: Future[Chunk]) -> Chunk:
        """GET one chunk, cache it, and hand it to every reader waiting on ``future``."""
        start = index * self.chunk_bytes
        try:
            data = self._get(key, start, min(start + self.chunk_bytes, object_size))
        except BaseException as error:
            self._settle(key, index)
            future.set_exception(error)
            raise
        future.set_result(data)  # the reader goes on; the disk cache's write comes after
        try:
            self._writer.submit(self._store, key, index, data)
        except RuntimeError:  # closed: nothing more is cached
            self._settle(key, index)
        return data

    def _get(self, key: str, start: int, end: int) -> bytes:
        """One ranged GET, observed; a short answer is an error."""
        began = time.perf_counter()
        try:
            data = self.store.get(key, start, end)
            if len(data) != end - start:
                raise ObjectStoreError(
                    f"{key}: {end - start} bytes expected at {start}, the store returned "
                    f"{len(data)} (the object is shorter than its metadata says)"
                )
        except BaseException as error:
            self.on_fetch(time.perf_counter() - began, -1, error)
            raise
        self.on_fetch(time.perf_counter() - began, len(data), None)
        return data

    def _settle(self, key: str, index: int) -> None:
        with self._lock:
            self._in_flight.pop((key, index), None)

    def close(self) -> None:
        """Stop prefetching: fetches already running finish, queued ones are dropped (and
        a reader waiting on one gets an error rather than waiting forever)."""
        with self._lock:
            self._closed = True
        self._ahead_pool.shutdown(wait=True, cancel_futures=True)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._writer.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            dropped, self._in_flight = list(self._in_flight.values()), {}
        for future in dropped:
            if not future.done():
                future.set_exception(ObjectStoreError("the remote reader was closed"))
