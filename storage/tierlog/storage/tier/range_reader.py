"""Byte ranges of remote objects, read in chunks through the disk cache, with prefetch.

A read of ``[start, end)`` of an object becomes the chunks that cover it: cached ones
come from the ``ChunkCache``, missing ones are ranged GETs of exactly one chunk each
(the first in the caller's thread, the others in parallel on the pool). Then the
chunks after the range are fetched in the background (``prefetch_chunks``), so a
consumer reading a remote segment front to back finds its next bytes already cached.

One GET per chunk, whoever asks: a read that needs a chunk already being fetched (by a
prefetch or another reader) waits for that fetch instead of issuing its own.

Objects are immutable and their size is known from the tier's metadata, so no chunk
ever reads past an object's end (S3 refuses a range starting beyond it). A store that
returns fewer bytes than the metadata promises is an error, not a short read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.store import ObjectStore, ObjectStoreError

__all__ = ["FetchObserver", "RangeReader"]

log = logging.getLogger(__name__)

# Called after each remote GET with its latency and bytes (the sidecar's histogram),
# or with the error it raised and -1 bytes.
FetchObserver = Callable[[float, int, BaseException | None], None]


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
        threads: int = 4,
        on_fetch: FetchObserver = _ignore,
    ):
        self.store = store
        self.cache = cache
        self.chunk_bytes = cache.chunk_bytes
        self.prefetch_chunks = max(prefetch_chunks, 0)
        self.on_fetch = on_fetch
        self._pool = ThreadPoolExecutor(max(threads, 1), thread_name_prefix="tier-fetch")
        self._lock = threading.Lock()
        self._in_flight: dict[tuple[str, int], Future[bytes]] = {}
        self._closed = False

    def read(
        self, key: str, start: int, end: int, object_size: int, *, prefetch: bool = True
    ) -> bytes:
        """Bytes ``[start, end)`` of object ``key`` of ``object_size`` bytes (clipped to it);
        ``prefetch=False`` for reads that are not followed by the bytes after them
        (an index lookup)."""
        end = min(end, object_size)
        if start >= end:
            return b""
        chunk = self.chunk_bytes
        first, last = start // chunk, (end - 1) // chunk
        pending = {i: self._fetching(key, i, object_size) for i in range(first + 1, last + 1)}
        pieces = [self.chunk(key, first, object_size)]
        pieces += [self._wait(key, i, object_size, pending[i]) for i in range(first + 1, last + 1)]
        if prefetch:
            self.prefetch(key, last + 1, object_size)
        head, tail = start - first * chunk, end - last * chunk
        if first == last:
            return pieces[0][head:tail]
        # One copy: the pieces' parts are joined straight into the answer.
        views = [memoryview(piece) for piece in pieces]
        return b"".join([views[0][head:], *views[1:-1], views[-1][:tail]])

    def chunk(self, key: str, index: int, object_size: int) -> bytes:
        """Chunk ``index`` of ``key``: from the cache, a fetch in flight, or a GET here."""
        cached = self.cache.get(key, index)
        if cached is not None:
            return cached
        with self._lock:
            running = self._in_flight.get((key, index))
            if running is None:
                mine: Future[bytes] = Future()
                self._in_flight[(key, index)] = mine
        if running is not None:
            return running.result()
        return self._fetch(key, index, object_size, mine)

    def prefetch(self, key: str, from_index: int, object_size: int) -> None:
        """Fetch the ``prefetch_chunks`` chunks from ``from_index`` on in the background."""
        chunks = -(-object_size // self.chunk_bytes)
        for index in range(from_index, min(from_index + self.prefetch_chunks, chunks)):
            if not self.cache.contains(key, index):
                self._fetching(key, index, object_size)

    def _fetching(self, key: str, index: int, object_size: int) -> Future[bytes] | None:
        """Start a background fetch of a missing chunk (None when cached already)."""
        if self.cache.contains(key, index):
            return None
        with self._lock:
            if (key, index) in self._in_flight:
                return self._in_flight[(key, index)]
            if self._closed:
                return None
            future: Future[bytes] = Future()
            self._in_flight[(key, index)] = future
        self._pool.submit(self._fetch_quietly, key, index, object_size, future)
        return future

    def _wait(self, key: str, index: int, object_size: int, future: Future[bytes] | None) -> bytes:
        if future is None:  # cached when we looked (but maybe evicted since)
            return self.chunk(key, index, object_size)
        return future.result()

    def _fetch_quietly(self, key: str, index: int, object_size: int, future: Future[bytes]) -> None:
        try:
            self._fetch(key, index, object_size, future)
        except Exception as error:  # whoever waits on the future gets it; a prefetch has no one
            log.debug("prefetch of %s chunk %d failed: %s", key, index, error)

    def _fetch(self, key: str, index: int, object_size: int, future: Future[bytes]) -> bytes:
        """GET one chunk, cache it, and hand it to every reader waiting on ``future``."""
        start = index * self.chunk_bytes
        end = min(start + self.chunk_bytes, object_size)
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
            self._settle(key, index)
            future.set_exception(error)
            raise
        self.on_fetch(time.perf_counter() - began, len(data), None)
        self.cache.put(key, index, data)
        self._settle(key, index)
        future.set_result(data)
        return data

    def _settle(self, key: str, index: int) -> None:
        with self._lock:
            self._in_flight.pop((key, index), None)

    def close(self) -> None:
        """Stop prefetching: fetches already running finish, queued ones are dropped (and
        a reader waiting on one gets an error rather than waiting forever)."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            dropped, self._in_flight = list(self._in_flight.values()), {}
        for future in dropped:
            if not future.done():
                future.set_exception(ObjectStoreError("the remote reader was closed"))
