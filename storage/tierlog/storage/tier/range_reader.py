"""Byte ranges of remote objects, read in chunks through the disk cache, with read-ahead.

A read of ``[start, end)`` of an object becomes the chunks that cover it: cached ones
come from the ``ChunkCache``, those being fetched from that fetch, and missing ones from
ranged GETs, one for each run of consecutive missing chunks (up to a read-ahead GET's
size; the first in the caller's thread, the others in parallel on the pool). What a
reader waits for goes before what it may read later: a read-ahead GET asked for while
readers wait on such GETs waits for them, so a fetch over 8 cold partitions is their 8
first chunks from the store at once, not 8 windows read ahead sharing the store and the
CPU with them (a reader at an object's start gets its window a GET later: the price
of that for a lone reader). A GET reads its chunks straight into
buffers used again once nothing views them (``ChunkBuffers``: fresh memory for every
chunk was a third of a cold read's CPU). Chunks travel as views of the buffers they
arrived in (a GET's, a cache file's), and a read hands its caller those views
(``read_pieces``): nothing is copied on the way, so a reader copies only what it
answers with.

Read-ahead adapts to the reader. A read that continues where an earlier one of the same
object ended (in the chunk it ended in, or the next) belongs to a sequential reader,
whose window of chunks fetched ahead doubles with each such read, from
``prefetch_chunks`` up to ``max_prefetch_chunks``; a read that starts anywhere else but
at the object's start (a random reader, an index lookup: ``prefetch=False``) gets none,
so random readers cost no GETs beyond their own. The window is topped up in ranged GETs
of up to ``READ_AHEAD_GET_BYTES`` (several chunks each, split into chunks for the cache),
only once a GET's worth of it is missing: a deep window is a few large GETs in flight,
which is what runs near the store's own throughput (a GET costs a round trip and, here,
a request's worth of client CPU, however small it is). A GET's chunks are handed over
one by one as their bytes land, so a reader reads behind a GET as behind one stream:
waiting for whole 8 MiB answers left a reader idle for most of a cold read once the
store was 20 ms away.

Chunks read ahead are used once: they wait in memory until their reader takes them, and
are not written to the disk cache. What read-ahead holds in memory over all readers
(``read_ahead_memory_bytes``) never exceeds its limit: a GET's bytes are reserved before
it is made (pushing the oldest unread chunks out to the disk cache, or waiting for GETs
in flight to land), a GET comes back as one buffer per chunk, so a chunk a reader
keeps never keeps the rest of its GET's answer alive, and a chunk read while its GET is
still answering keeps its room until the answer is in (the GET holds it till then). Writing
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
fetch counts as in flight until the write is done. At most ``WRITE_BEHIND_CHUNKS`` wait
for the writer: beyond them a reader writes its own, so a writer behind the reads holds
a few chunks alive, not every one read since.

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
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from tierlog.storage.tier.chunk_buffers import ChunkBuffers
from tierlog.storage.tier.chunk_cache import Chunk, ChunkCache
from tierlog.storage.tier.pieces import Pieces
from tierlog.storage.tier.store import ObjectStore, ObjectStoreError, PiecewiseStore

__all__ = [
    "LANDED_MAX_BYTES",
    "READ_AHEAD_GET_BYTES",
    "TAIL_CHUNKS",
    "WRITE_BEHIND_CHUNKS",
    "FetchObserver",
    "RangeReader",
]

log = logging.getLogger(__name__)

# Called after each remote GET with its latency and bytes (the sidecar's histogram),
# or with the error it raised and -1 bytes.
FetchObserver = Callable[[float, int, BaseException | None], None]

# The largest ranged GET read-ahead makes (at least one chunk).
READ_AHEAD_GET_BYTES = 8 << 20
# Sequential readers remembered, by object and the chunk each read last.
_STREAMS = 1024
# The chunks the latest sequential reads ended in, and those read ahead that were read
# last, kept in memory: the next read of a sequential reader starts in the chunk its last
# one ended in (or a little before: an offset index entry), and reading that chunk from
# the disk cache again (and checking its CRC again) was half of a warm read's work; a
# chunk read ahead is not in the disk cache at all. A random reader's chunks are in the
# disk cache, and are not kept here (they would push a sequential reader's out). Each is
# one chunk's own buffer (or cache file's).
TAIL_CHUNKS = 16
# Chunks handed to their readers that wait for the disk cache's writer at most (the one
# being written included); beyond them a reader writes its chunk itself. Queued without
# bound, a writer behind the reads (a slow cache disk, a loaded machine) kept every chunk
# read since alive, read-ahead's among them: six readers held 26 chunks past its limit.
WRITE_BEHIND_CHUNKS = 4
# What read-ahead may hold in memory over all readers by default (chunks waiting to be
# read, GETs in flight): a sequential reader takes its chunks from there, neither
# reading a file back nor checking its CRC again.
LANDED_MAX_BYTES = 64 << 20


def _ignore(_seconds: float, _bytes: int, _error: BaseException | None) -> None:
    pass


def _nothing_landed(_position: int, _chunk: Chunk) -> None:
    pass


@dataclass
class _Answer:
    """A read-ahead GET still answering: the bytes of its chunks read meanwhile, whose
    room it gives back once its answer is in (its buffers are alive until then)."""

    read_bytes: int = 0


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
        buffers: ChunkBuffers | None = None,
    ):
        """``prefetch_chunks``: a sequential reader's first window (and the window of a
        read from an object's start), 0 for no read-ahead at all; ``max_prefetch_chunks``:
        its deepest; ``threads``: GETs in flight for read-ahead, and as many again for the
        chunks readers wait on; ``read_ahead_memory_bytes``: chunks read ahead held in
        memory until read, over all readers; ``buffers``: what GETs read chunks into
        (by default its own, keeping up to read-ahead's memory and the recent chunks:
        what a busy reader holds anyway)."""
        self.store = store
        self.cache = cache
        self.chunk_bytes = cache.chunk_bytes
        self.prefetch_chunks = max(prefetch_chunks, 0)
        self.max_prefetch_chunks = (
            max(max_prefetch_chunks, self.prefetch_chunks) if self.prefetch_chunks else 0
        )
        self.on_fetch = on_fetch
        self.read_ahead_memory_bytes = read_ahead_memory_bytes
        kept_chunks = read_ahead_memory_bytes // self.chunk_bytes + TAIL_CHUNKS
        self.buffers = ChunkBuffers(self.chunk_bytes, kept_chunks) if buffers is None else buffers
        if read_ahead_memory_bytes < self.chunk_bytes:  # not one chunk's room: none ahead
            self.prefetch_chunks = self.max_prefetch_chunks = 0
        # A GET's answer is held whole, so none may be larger than the memory allowed.
        get_bytes = min(READ_AHEAD_GET_BYTES, read_ahead_memory_bytes)
        self._get_chunks = max(get_bytes // self.chunk_bytes, 1)
        # A reader from an object's start (a consumer crossing into a segment, a scan)
        # reads on: its first window is one read-ahead GET's worth, in one request, not
        # ``prefetch_chunks`` then twice that, each a round trip and a request's CPU.
        self._first_window = (
            max(self.prefetch_chunks, min(self._get_chunks, self.max_prefetch_chunks))
            if self.prefetch_chunks
            else 0
        )
        self._pool = ThreadPoolExecutor(max(threads, 1), thread_name_prefix="tier-fetch")
        self._ahead_pool = ThreadPoolExecutor(max(threads, 1), thread_name_prefix="tier-ahead")
        # Chunks a reader waited for go to the disk cache here, after the reader has them.
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="tier-cache-write")
        self._lock = threading.Lock()
        # Notified when read-ahead memory may have room again (see ``_reserve``).
        self._room = threading.Condition(self._lock)
        self._in_flight: dict[tuple[str, int], Future[Chunk]] = {}
        # The GETs readers wait on, until done: the caller's own and those it started on
        # ``_pool``, never read-ahead's (a read-ahead GET waits for these in
        # ``_ahead_pool``: one waiting there for another queued behind it would wait
        # forever). A lock of its own, taken last: a future is done where ``_lock`` is held.
        self._demanded: set[Future[Chunk]] = set()
        self._demand_lock = threading.Lock()
        self._streams: OrderedDict[tuple[str, int], int] = OrderedDict()  # -> window depth
        self._tails: OrderedDict[tuple[str, int], Chunk] = OrderedDict()  # the last chunks read
        self._landed: OrderedDict[tuple[str, int], Chunk] = OrderedDict()  # read ahead, unread
        # Chunks landed and unread whose GET is still answering: its buffers are all alive
        # until the answer is in, so a chunk read meanwhile leaves its room to its GET's
        # ``_Answer`` until then (``_answered``).
        self._answering: dict[tuple[str, int], _Answer] = {}
        # Read-ahead memory: chunks landed and not read, those pushed out on their way to
        # the disk cache (``_freeing_bytes`` of it), and room reserved for GETs in flight
        # (the whole answer, chunks read meanwhile included, until it is in).
        self._held_bytes = 0
        self._freeing_bytes = 0
        self._writes_behind = 0  # chunks queued for the writer (``_write_behind``)
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
        window = self._window(key, first, last) if prefetch else None
        depth = window or 0
        # Read-ahead makes its room by pushing the oldest unread chunks out to the disk
        # cache, whose read-ahead share then drops its oldest: this read's own chunks must
        # be taken first, and read-ahead asked for once they are in.
        taken = self._take_in_memory(key, first, last)
        indexes = range(first, last + 1)
        missing = [i for i in indexes if i not in taken]
        pending = self._fetching(key, missing, object_size, demanded=True)
        pieces = [
            taken[i] if i in taken else self._wait(key, i, object_size, pending[i]) for i in indexes
        ]
        if window is not None:  # a random read's chunks are in the disk cache
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
            return landed
        if running is not None:
            return self._taken(key, index, running)
        self._demand(mine)
        self._fetch(key, [index], object_size, [mine])
        return mine.result()

    def fetch_soon(self, key: str, start: int, end: int, object_size: int) -> None:
        """Start fetching the chunks of ``[start, end)`` that are neither cached nor
        coming, in the background and into the disk cache, for a read about to come
        (a segment's index, while its first log bytes are read without it)."""
        end = min(end, object_size)
        indexes = range(start // self.chunk_bytes, (end - 1) // self.chunk_bytes + 1)
        self._fetching(key, list(indexes), object_size)

    @property
    def read_ahead_memory_held_bytes(self) -> int:
        """Memory the chunks read ahead and not read yet keep alive (their GETs' answers)."""
        with self._lock:
            return self._held_bytes

    def in_flight(self, key: str) -> list[int]:
        """The chunks of ``key`` being fetched, in order (for tests and benchmarks)."""
        with self._lock:
            return sorted(index for name, index in self._in_flight if name == key)

    # -- read-ahead ----------------------------------------------------------------------

    def _tail(self, key: str, index: int) -> Chunk | None:
        """A chunk a recent read ended in or took from read-ahead's memory."""
        with self._lock:
            tail = self._tails.get((key, index))
        if tail is None:
            return None
        self.cache.found_in_memory(key, index)
        return tail

    def _keep_tail(self, key: str, index: int, data: Chunk) -> None:
        with self._lock:
            self._keep_tail_locked(key, index, data)

    def _keep_tail_locked(self, key: str, index: int, data: Chunk) -> None:
        self._tails[(key, index)] = data
        self._tails.move_to_end((key, index))
        while len(self._tails) > TAIL_CHUNKS:
            self._tails.popitem(last=False)

    def _window(self, key: str, first: int, last: int) -> int | None:
        """How many chunks to keep fetched ahead of a read of chunks ``[first, last]``:
        deeper for a reader that continues an earlier read; None for one that jumped (a
        random reader: nothing read ahead, and the chunk it ended in is not kept among
        the recent ones in memory, where it would push out a sequential reader's)."""
        with self._lock:
            depth = None
            for ended in (first, first - 1, first + 1):
                depth = self._streams.pop((key, ended), None)
                if depth is not None:
                    break
            if depth is not None:
                depth = min(max(2 * depth, self.prefetch_chunks), self.max_prefetch_chunks)
            elif first == 0:  # a new reader: sequential only when it starts at the start
                depth = self._first_window
            self._streams[(key, last)] = depth or 0
            while len(self._streams) > _STREAMS:
                self._streams.popitem(last=False)
            return depth

    def _read_ahead(self, key: str, from_index: int, depth: int, object_size: int) -> None:
        """Fetch the missing chunks of ``[from_index, from_index + depth)`` in ranged GETs
        of up to ``_get_chunks`` chunks; a short run at the window's far end waits until a
        GET's worth (or half the window) is missing, so GETs stay large. The GETs wait
        for those readers wait on now (``_demanded``), not for later ones: read-ahead
        is put off, never starved. A reader with
        chunks coming already deepens its window only into free memory: making room
        would push out other readers' unread chunks (written to disk, read back: the CPU
        of a GET again), and those readers read on too, freeing memory as they go. A
        reader with nothing coming makes room (a reader that stopped half-way frees none)."""
        chunks = -(-object_size // self.chunk_bytes)
        stop = min(from_index + depth, chunks)
        top_up = max(1, min(self._get_chunks, depth // 2))
        runs: list[list[int]] = [[]]
        coming = False
        with self._lock:
            if self._closed:
                return
            for index in range(from_index, stop):
                name = (key, index)
                if name in self._tails:  # in memory, read already (by the read asking)
                    runs.append([])
                elif name in self._in_flight or name in self._landed or self.cache.contains(*name):
                    coming = True
                    runs.append([])
                elif len(runs[-1]) == self._get_chunks:
                    runs.append([index])
                else:
                    runs[-1].append(index)
            if stop < chunks and len(runs[-1]) < top_up:
                runs.pop()
            if coming:
                runs = self._within_free_memory_locked(runs)
            futures = [self._coming_locked(key, run) for run in runs]
        demanded = self._demanded_now()
        for run, waiting in zip(runs, futures, strict=True):
            if run:
                self._ahead_pool.submit(
                    self._fetch_run, key, run, object_size, waiting, [*demanded]
                )

    def _coming_locked(self, key: str, run: list[int]) -> list[Future[Chunk]]:
        """The futures of a read-ahead GET's chunks, in flight from now on. Made here so
        that their issuer keeps only these lists, which each GET empties once its answer
        is in (``_fetch_run``): made in a loop of ``_read_ahead``, its variable kept the
        last future, and through it its chunk, alive and uncounted (pushed out, or read)
        until the issuer ran on."""
        futures: list[Future[Chunk]] = [Future() for _ in run]
        self._in_flight.update(zip([(key, index) for index in run], futures, strict=True))
        return futures

    def _within_free_memory_locked(self, runs: list[list[int]]) -> list[list[int]]:
        """The first runs whose GETs fit in the read-ahead memory not held."""
        room = self.read_ahead_memory_bytes - self._held_bytes
        kept = []
        for run in runs:
            room -= len(run) * self.chunk_bytes
            if room < 0:
                break
            kept.append(run)
        return kept

    def _fetch_run(
        self,
        key: str,
        run: list[int],
        object_size: int,
        futures: list[Future[Chunk]],
        demanded: list[Future[Chunk]],
    ) -> None:
        """GET consecutive chunks in one ranged GET once the GETs readers waited on
        (``demanded``) are done, keep them in memory until read, and hand each to whoever
        waits on it as soon as its bytes are in, while the rest of the answer is still
        coming (a reader reads behind the GET as behind one stream, not a whole GET's
        transfer later): as views of the GET's buffers, not copies."""
        wait(demanded)
        demanded.clear()  # their chunks are their readers', not this GET's to keep alive
        chunk = self.chunk_bytes
        start, end = run[0] * chunk, min((run[-1] + 1) * chunk, object_size)
        landed = 0  # chunks of the run handed over
        answer = _Answer()

        def land(position: int, piece: Chunk) -> None:
            nonlocal landed
            with self._room:  # the room reserved for it is now the chunk's own
                self._land_locked(key, run[position], piece, futures[position])
                self._answering[(key, run[position])] = answer
            landed = position + 1

        try:
            if not self._reserve(end - start):
                raise ObjectStoreError("the remote reader was closed")
            try:
                self._get_pieces(key, start, end, land)
            except BaseException:
                with self._room:  # the room of the chunks that never came
                    self._held_bytes -= end - min(start + landed * chunk, end)
                    self._room.notify_all()
                raise
        except BaseException as error:
            for index, future in zip(run[landed:], futures[landed:], strict=True):
                self._settle(key, index)
                future.set_exception(error)
            log.debug("read-ahead of %s chunks %d-%d failed: %s", key, run[0], run[-1], error)
        # The thread that issued the GET holds ``futures`` until it runs on (on a loaded
        # machine, after these chunks were pushed out to the disk cache and no longer
        # counted): it may not keep a chunk alive beyond the count.
        futures.clear()
        self._answered(key, run[:landed], answer)

    def _land_locked(self, key: str, index: int, piece: Chunk, future: Future[Chunk]) -> None:
        """A chunk a read-ahead GET brought, unread: in memory, to its future."""
        self._landed[(key, index)] = piece
        self._in_flight.pop((key, index), None)
        future.set_result(piece)
        self._room.notify_all()  # landed chunks can be pushed out to make room

    def _answered(self, key: str, landed: list[int], answer: _Answer) -> None:
        """A read-ahead GET's answer is in and its thread holds none of it: the room of
        its chunks read meanwhile is free (those unread keep theirs until read)."""
        with self._room:
            for index in landed:
                if self._answering.get((key, index)) is answer:
                    del self._answering[(key, index)]
            self._held_bytes -= answer.read_bytes
            self._room.notify_all()

    def _reserve(self, needed_bytes: int) -> bool:
        """Reserve read-ahead memory for a GET of ``needed_bytes`` before making it, so
        what read-ahead holds never exceeds ``read_ahead_memory_bytes``. Room is made by
        pushing the oldest unread chunks out to the disk cache (written here, before this
        GET: the newest read-ahead wins, and a reader slower than memory allows finds its
        chunks on disk); failing that, it waits for those being written or for GETs in
        flight to land. False: the reader closed."""
        while True:
            with self._room:
                while True:
                    if self._closed:
                        return False
                    short = self._held_bytes + needed_bytes - self.read_ahead_memory_bytes
                    if short <= 0:
                        self._held_bytes += needed_bytes
                        return True
                    pushed_out = self._push_out_locked(short - self._freeing_bytes)
                    if pushed_out:
                        break
                    self._room.wait()  # until a write frees memory or a GET lands
            for pushed_key, pushed_index in pushed_out:
                self._spill(pushed_key, pushed_index)

    def _push_out_locked(self, wanted_bytes: int) -> list[tuple[str, int]]:
        """Take the oldest unread chunks read ahead out of memory, at least
        ``wanted_bytes`` of them if there are, to be written to the disk cache. Until
        written, each is held only as a fetch done (where readers find it meanwhile).
        A chunk whose GET is still answering is not taken: that frees nothing."""
        pushed_out: list[tuple[str, int]] = []
        for name in [name for name in self._landed if name not in self._answering]:
            if wanted_bytes <= 0:
                break
            data = self._landed.pop(name)
            done: Future[Chunk] = Future()
            done.set_result(data)
            self._in_flight[name] = done
            self._freeing_bytes += len(data)
            wanted_bytes -= len(data)
            pushed_out.append(name)
        return pushed_out

    def _store(self, key: str, index: int, data: Chunk) -> None:
        """Write a fetched chunk (already handed to its reader) to the disk cache; its
        fetch stays in flight until then, so no reader fetches it again meanwhile."""
        try:
            self.cache.put(key, index, data)
        finally:
            self._settle(key, index)

    def _spill(self, key: str, index: int) -> None:
        """An unread chunk read ahead, pushed out of memory: into the disk cache's
        read-ahead share, where its reader finds it. Its memory is counted until the
        last reference this reader keeps is gone."""
        with self._lock:
            data = self._in_flight[(key, index)].result()
        size = len(data)
        try:
            self.cache.put(key, index, data, read_ahead=True)
        finally:
            del data
            with self._room:
                self._in_flight.pop((key, index), None)
                self._freeing_bytes -= size
                self._held_bytes -= size
                self._room.notify_all()

    def _fetching(
        self, key: str, indexes: list[int], object_size: int, *, demanded: bool = False
    ) -> dict[int, Future[Chunk] | None]:
        """The fetch of each of ``indexes`` (ascending): one in flight, or one started here
        in a GET for each run of consecutive chunks neither cached, in memory nor coming
        (None for those cached or in memory). Without ``demanded`` the GETs run in the
        background (a read about to come); with it a reader waits for these chunks:
        the first run's GET is made here, in the reader's thread, and read-ahead asked
        for meanwhile waits for them all."""
        found: dict[int, Future[Chunk] | None] = {}
        runs: list[list[int]] = []
        fetches: list[list[Future[Chunk]]] = []
        cached = {index for index in indexes if self.cache.contains(key, index)}
        with self._lock:
            for index in indexes:
                name = (key, index)
                if name in self._in_flight:
                    found[index] = self._in_flight[name]
                    continue
                if self._closed or index in cached or name in self._landed or name in self._tails:
                    found[index] = None
                    continue
                future: Future[Chunk] = Future()
                found[index] = self._in_flight[name] = future
                if runs and runs[-1][-1] == index - 1 and len(runs[-1]) < self._get_chunks:
                    runs[-1].append(index)
                    fetches[-1].append(future)
                else:
                    runs.append([index])
                    fetches.append([future])
        if demanded:
            # Misses: the chunks this read waits for (one whose fetch is done is in memory).
            self.cache.missed(sum(f is not None and not f.done() for f in found.values()))
            for futures in fetches:
                for future in futures:
                    self._demand(future)
        here = 1 if demanded and runs else 0
        for run, futures in zip(runs[here:], fetches[here:], strict=True):
            self._pool.submit(self._fetch_quietly, key, run, object_size, futures)
        if here:
            self._fetch_quietly(key, runs[0], object_size, fetches[0])
        return found

    def _demand(self, future: Future[Chunk]) -> None:
        with self._demand_lock:
            self._demanded.add(future)
        future.add_done_callback(self._demand_met)  # at once, here, when done already

    def _demand_met(self, future: Future[Chunk]) -> None:
        with self._demand_lock:
            self._demanded.discard(future)

    def _demanded_now(self) -> list[Future[Chunk]]:
        with self._demand_lock:
            return [*self._demanded]

    def _wait(self, key: str, index: int, object_size: int, future: Future[Chunk] | None) -> Chunk:
        if future is None:  # cached when we looked (but maybe evicted since)
            return self.chunk(key, index, object_size)
        return self._taken(key, index, future)

    def _taken(self, key: str, index: int, future: Future[Chunk]) -> Chunk:
        """The chunk another fetch brings; a chunk read ahead is now read."""
        data = future.result()
        if self._take_landed(key, index) is not None:
            self.cache.found_in_memory(key, index, read_ahead=True)
        else:
            self.cache.mark_read(key, index)
        return data

    def _take_in_memory(self, key: str, first: int, last: int) -> dict[int, Chunk]:
        """The chunks of ``[first, last]`` in memory, in order: a recent read's, or read
        ahead and waiting (now read)."""
        taken = {}
        for index in range(first, last + 1):
            found = self._tail(key, index)
            if found is None:
                found = self._take_landed(key, index)
                if found is not None:
                    self.cache.found_in_memory(key, index, read_ahead=True)
            if found is not None:
                taken[index] = found
        return taken

    def _take_landed(self, key: str, index: int) -> Chunk | None:
        """A chunk read ahead, read now: out of the unread ones, among the recent."""
        with self._lock:
            return self._take_landed_locked(key, index)

    def _take_landed_locked(self, key: str, index: int) -> Chunk | None:
        """As ``_take_landed``: the chunk's memory is the reader's now (once its GET's
        answer is in: ``_answered``)."""
        landed = self._landed.pop((key, index), None)
        if landed is None:
            return None
        self._keep_tail_locked(key, index, landed)
        answer = self._answering.pop((key, index), None)
        if answer is not None:
            answer.read_bytes += len(landed)
            return landed
        self._held_bytes -= len(landed)
        self._room.notify_all()
        return landed

    def _fetch_quietly(
        self, key: str, run: list[int], object_size: int, futures: list[Future[Chunk]]
    ) -> None:
        try:
            self._fetch(key, run, object_size, futures)
        except Exception as error:  # whoever waits on a future gets it; a prefetch has no one
            log.debug("fetch of %s chunks %d-%d failed: %s", key, run[0], run[-1], error)

    def _fetch(
        self, key: str, run: list[int], object_size: int, futures: list[Future[Chunk]]
    ) -> None:
        """GET consecutive chunks in one ranged GET, hand each to the readers waiting on
        its future once the GET has ended, then cache them."""
        start = run[0] * self.chunk_bytes
        end = min((run[-1] + 1) * self.chunk_bytes, object_size)

        try:
            pieces = self._get_pieces(key, start, end, _nothing_landed)
        except BaseException as error:
            for index, future in zip(run, futures, strict=True):
                self._settle(key, index)  # a chunk landed before the error is not cached
                if not future.done():
                    future.set_exception(error)
            raise
        # Handed over once the GET has ended, not as each chunk lands: a fetch that
        # answers has no GET of its own still running.
        for future, piece in zip(futures, pieces, strict=True):
            future.set_result(piece)  # the reader goes on; the cache's write after
        for index, piece in zip(run, pieces, strict=True):
            self._write_behind(key, index, piece)

    def _write_behind(self, key: str, index: int, data: Chunk) -> None:
        """Have a chunk in flight written to the disk cache on the writer's thread, or
        here when ``WRITE_BEHIND_CHUNKS`` wait for it already."""
        with self._lock:
            queued = self._writes_behind < WRITE_BEHIND_CHUNKS
            if queued:
                self._writes_behind += 1
        if not queued:
            self._store(key, index, data)
            return
        try:
            self._writer.submit(self._store_behind, key, index, data)
        except RuntimeError:  # closed: nothing more is cached
            self._written_behind()
            self._settle(key, index)

    def _store_behind(self, key: str, index: int, data: Chunk) -> None:
        """``_store`` on the writer's thread."""
        try:
            self._store(key, index, data)
        finally:
            self._written_behind()

    def _written_behind(self) -> None:
        with self._lock:
            self._writes_behind -= 1

    def _get_pieces(
        self, key: str, start: int, end: int, on_chunk: Callable[[int, Chunk], None]
    ) -> list[Chunk]:
        """One ranged GET (``start`` on a chunk's boundary), observed, as one buffer per
        chunk: a chunk never keeps a whole GET's answer alive (a reader holding one chunk
        of an answer would hold all of it, uncounted); a short answer is an error.
        ``on_chunk`` is given each chunk (its place in the answer, its bytes) as soon as
        it is whole."""
        began = time.perf_counter()
        try:
            pieces: list[Chunk]
            if isinstance(self.store, PiecewiseStore):
                views = [
                    self.buffers.take(min(self.chunk_bytes, end - at))
                    for at in range(start, end, self.chunk_bytes)
                ]
                got = self.store.get_into(key, start, views, lambda i: on_chunk(i, views[i]))
                pieces = [*views]
            else:
                data = self.store.get(key, start, end)
                pieces = [
                    data[at : at + self.chunk_bytes] for at in range(0, len(data), self.chunk_bytes)
                ]
                got = len(data)
                if got == end - start:
                    for position, piece in enumerate(pieces):
                        on_chunk(position, piece)
            if got != end - start:
                raise ObjectStoreError(
                    f"{key}: {end - start} bytes expected at {start}, the store returned "
                    f"{got} (the object is shorter than its metadata says)"
                )
        except BaseException as error:
            self.on_fetch(time.perf_counter() - began, -1, error)
            raise
        self.on_fetch(time.perf_counter() - began, got, None)
        return pieces

    def _settle(self, key: str, index: int) -> None:
        with self._lock:
            self._in_flight.pop((key, index), None)

    def close(self) -> None:
        """Stop prefetching: fetches already running finish, queued ones are dropped (and
        a reader waiting on one gets an error rather than waiting forever)."""
        with self._room:
            self._closed = True
            self._room.notify_all()  # read-ahead waiting for room gives up
        self._ahead_pool.shutdown(wait=True, cancel_futures=True)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._writer.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            dropped, self._in_flight = list(self._in_flight.values()), {}
        for future in dropped:
            if not future.done():
                future.set_exception(ObjectStoreError("the remote reader was closed"))
