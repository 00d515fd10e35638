"""Chunked ranged reads through the cache: exact bytes, one GET per chunk, prefetch."""

from __future__ import annotations

import contextlib
import random
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.storage.tier.tiering import minio_store
from tests.support.minio import MinioServer
from tierlog.storage.tier.chunk_buffers import Filled, nothing_filled
from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.range_reader import TAIL_CHUNKS, WRITE_BEHIND_CHUNKS, RangeReader
from tierlog.storage.tier.store import ObjectNotFoundError, ObjectStoreError

CHUNK = 1000
TRAILER = 12  # a cache file's trailer after its chunk


class RecordingStore(LocalDirectoryStore):
    """The real local store, remembering each ranged GET; ``gate`` holds GETs back."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.gets: list[tuple[str, int, int | None]] = []
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        self._record(key, start, end)
        return super().get(key, start, end)

    def get_into(
        self,
        key: str,
        start: int,
        buffers: Sequence[memoryview],
        on_filled: Filled = nothing_filled,
    ) -> int:
        self._record(key, start, start + sum(len(buffer) for buffer in buffers))
        return super().get_into(key, start, buffers, on_filled)

    def _record(self, key: str, start: int, end: int | None) -> None:
        with self._lock:
            self.gets.append((key, start, end))
        self.gate.wait(10)


@pytest.fixture
def store(tmp_path: Path) -> RecordingStore:
    return RecordingStore(tmp_path / "tier")


@pytest.fixture
def reader(tmp_path: Path, store: RecordingStore) -> Iterator[RangeReader]:
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 24, max_entries=1000)
    reader = RangeReader(store, cache, prefetch_chunks=0)
    yield reader
    reader.close()


def disk_bytes(directory: Path) -> int:
    """What the files in ``directory`` take (those deleted while it is scanned: nothing)."""
    total = 0
    for path in directory.iterdir():
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


def put_objects(store: LocalDirectoryStore, keys: Sequence[str], chunks: int) -> dict[str, bytes]:
    """Objects of ``chunks`` random chunks each, one a key, in ``store``: their bodies."""
    bodies = {key: random.Random(key).randbytes(chunks * CHUNK) for key in keys}
    for key, body in bodies.items():
        store.put(key, body)
    return bodies


def wait_until(condition: object, timeout_s: float = 5) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.01)
    raise AssertionError("timed out")


def test_any_range_reads_exactly_the_objects_bytes(
    store: RecordingStore, reader: RangeReader
) -> None:
    body = random.Random(5).randbytes(10_500)
    store.put("seg", body)
    rng = random.Random(7)
    for _ in range(200):
        start = rng.randrange(0, len(body))
        end = rng.randrange(start, len(body) + 50)
        assert reader.read("seg", start, end, len(body)) == body[start:end]
    assert reader.read("seg", 10_500, 11_000, len(body)) == b""


def test_a_reads_missing_chunks_are_one_get_a_run_of_whole_chunks_then_the_cache_answers(
    store: RecordingStore, reader: RangeReader
) -> None:
    body = bytes(range(256)) * 20  # 5120 bytes: chunks 0..5, the last one 120 bytes
    store.put("seg", body)
    assert reader.read("seg", 1500, 3100, len(body)) == body[1500:3100]
    assert store.gets == [("seg", 1000, 4000)]  # chunks 1-3
    wait_until(lambda: reader.in_flight("seg") == [])  # written to the cache after the read
    assert (reader.cache.stats().misses, reader.cache.stats().hits) == (3, 0)
    store.gets.clear()
    assert reader.read("seg", 1000, 4000, len(body)) == body[1000:4000]
    assert reader.read("seg", 4000, 9999, len(body)) == body[4000:]
    assert store.gets == [("seg", 4000, 5120)]  # 4-5, not past the end
    wait_until(lambda: reader.in_flight("seg") == [])  # written to the cache after the read
    assert reader.cache.entries == 5
    store.gets.clear()
    assert reader.read("seg", 0, 5120, len(body)) == body
    assert store.gets == [("seg", 0, 1000)]  # the one chunk missing
    assert reader.cache.stats().misses == 3 + 2 + 1  # each chunk once, when it was fetched
    store.gets.clear()
    assert reader.read("seg", 0, 5120, len(body)) == body
    assert store.gets == []


def test_chunks_cached_between_missing_ones_split_a_reads_gets(
    store: RecordingStore, reader: RangeReader
) -> None:
    body = random.Random(3).randbytes(5 * CHUNK)
    store.put("seg", body)
    assert reader.read("seg", 2 * CHUNK, 3 * CHUNK, len(body)) == body[2 * CHUNK : 3 * CHUNK]
    wait_until(lambda: reader.in_flight("seg") == [])
    store.gets.clear()
    assert reader.read("seg", 0, len(body), len(body)) == body
    assert sorted(store.gets) == [("seg", 0, 2 * CHUNK), ("seg", 3 * CHUNK, 5 * CHUNK)]


def test_a_read_from_an_objects_start_gets_its_chunk_then_one_gets_worth_ahead(
    tmp_path: Path, store: RecordingStore
) -> None:
    """A reader from an object's start (a consumer crossing into a segment) reads on: its
    first window is one read-ahead GET's worth (capped by the deepest window), not
    ``prefetch_chunks``. The read's own chunk is a GET of its own, and the window's GET
    waits until it is in: what a reader waits for goes first. No chunk is fetched twice."""
    body = bytes(40 * CHUNK)
    store.put("seg", body)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 20, max_entries=100)
    reader = RangeReader(store, cache, prefetch_chunks=2, max_prefetch_chunks=16)
    store.gate.clear()  # no GET answers until the read is waiting
    reading = threading.Thread(target=reader.read, args=("seg", 0, 10, len(body)))
    try:
        reading.start()
        wait_until(lambda: len(store.gets) == 1)
        time.sleep(0.2)  # time enough for the window's GET, were it not held back
        assert store.gets == [("seg", 0, 1000)]
        store.gate.set()
        reading.join(10)
        wait_until(lambda: reader.in_flight("seg") == [])
        assert store.gets == [("seg", 0, 1000), ("seg", 1000, 17_000)]  # chunks 1-16 ahead
        store.gets.clear()
        assert reader.read("seg", 1000, 17_000, len(body)) == body[1000:17_000]
        assert [get for get in store.gets if get[1] < 17_000] == []  # read ahead: no GET
    finally:
        store.gate.set()
        reading.join(10)
        reader.close()


class KeyHeldStore(RecordingStore):
    """A ``RecordingStore`` whose GETs of the keys ``hold`` names wait for their ``release``."""

    def __init__(self, root: Path):
        super().__init__(root)
        self._held: dict[str, threading.Event] = {}

    def hold(self, key: str) -> None:
        self._held[key] = threading.Event()

    def release(self, key: str) -> None:
        """Let ``key``'s GETs go (again: nothing)."""
        held = self._held.pop(key, None)
        if held is not None:
            held.set()

    def _record(self, key: str, start: int, end: int | None) -> None:
        super()._record(key, start, end)
        held = self._held.get(key)
        if held is not None:
            held.wait(10)


def test_read_ahead_waits_for_the_gets_other_readers_wait_on(tmp_path: Path) -> None:
    """Reader b still waits on its first chunk when reader a's read is answered: a's
    window is not fetched until b has its chunk (a fetch over cold partitions gets every
    partition's first chunk before any read-ahead shares the store with them)."""
    store = KeyHeldStore(tmp_path / "tier")
    bodies = put_objects(store, ("a", "b"), 20)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 22, max_entries=400)
    reader = RangeReader(store, cache, prefetch_chunks=2, max_prefetch_chunks=8)
    store.hold("b")
    waiting = threading.Thread(target=reader.read, args=("b", 0, CHUNK, 20 * CHUNK))
    try:
        waiting.start()
        wait_until(lambda: store.gets == [("b", 0, CHUNK)])
        assert reader.read("a", 0, CHUNK, 20 * CHUNK) == bodies["a"][:CHUNK]
        time.sleep(0.2)  # time enough for a's window GET, were it not held back
        assert store.gets == [("b", 0, CHUNK), ("a", 0, CHUNK)]
        store.release("b")
        waiting.join(10)
        wait_until(lambda: reader.in_flight("a") == reader.in_flight("b") == [])
        assert sorted(store.gets[2:]) == [("a", CHUNK, 9 * CHUNK), ("b", CHUNK, 9 * CHUNK)]
    finally:
        store.release("b")
        waiting.join(10)
        reader.close()


def test_chunks_read_ahead_are_used_once_from_memory_and_spill_to_disk_only_when_pushed_out(
    tmp_path: Path, store: RecordingStore
) -> None:
    """A sequential reader's chunks read ahead wait in memory and are not written to the
    disk cache (a scan read once, whose write cost as much as its GET); the ones memory
    pushes out unread go to the cache's read-ahead share, and their reader finds every
    one without a second GET. A chunk read while its GET is answering keeps its room
    until the GET's thread has the whole answer in, which can come after the read, its
    disk write and ``in_flight`` emptied (a loaded machine deschedules that thread
    there): the count held is waited for, not read at once."""
    bodies = put_objects(store, ("a", "b"), 12)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 20, max_entries=100)
    reader = RangeReader(
        store, cache, prefetch_chunks=8, max_prefetch_chunks=8, read_ahead_memory_bytes=8 * CHUNK
    )

    def on_disk(key: str) -> list[int]:
        return [index for index in range(12) if cache.contains(key, index)]

    try:
        for key in ("a", "b"):  # from the start: chunk 0, then 1-8 ahead in one GET (all memory)
            assert reader.read(key, 0, 10, 12 * CHUNK) == bodies[key][:10]
            wait_until(lambda: reader.in_flight(key) == [])  # noqa: B023
        wait_until(lambda: reader.in_flight("a") == [])  # spilled while b's GET landed
        assert on_disk("a") == list(range(9))  # 0 waited for by its read; 1-8 pushed out by b's
        assert on_disk("b") == [0]  # 1-8 in memory: its GET's answer, held
        wait_until(lambda: reader.read_ahead_memory_held_bytes == 8 * CHUNK)  # b's 1-8
        store.gets.clear()
        for key in ("a", "b"):
            assert reader.read(key, 10, 12 * CHUNK, 12 * CHUNK) == bodies[key][10:]
        assert [get for get in store.gets if get[1] < 9 * CHUNK] == []  # 1-8: read ahead
        fetched = sorted(
            (key, start // CHUNK + at)
            for key, start, end in store.gets
            for at in range(((end or 0) - start) // CHUNK)
        )
        assert fetched == [(key, index) for key in ("a", "b") for index in range(9, 12)]  # once
        wait_until(lambda: reader.in_flight("b") == [])
        assert on_disk("b") == [0, 9, 10, 11]  # 1-8 used once, never written; 9-11 waited
        wait_until(lambda: reader.read_ahead_memory_held_bytes == 0)  # every one read ahead read
        # a's 1-8 from the cache's read-ahead share, b's from memory; the chunks the reads
        # waited for (0, 9-11) were GETs of their own, into the ordinary cache.
        assert cache.stats().read_ahead_hits == 16
    finally:
        reader.close()


class ReadAheadLedgerStore(LocalDirectoryStore):
    """The real local store, watching the chunks its answers to read-ahead GETs (made
    on the reader's read-ahead threads) fill, views of the reader's buffers that it
    keeps until read: the bytes alive at most, taken as each
    answer is made (the only moment they grow), the reader's own count of its
    read-ahead memory at that moment (the room reserved for that GET included), the
    read-ahead GETs made and bytes they asked for, and which chunks are alive."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.reader: RangeReader | None = None
        self.read_ahead_gets = 0
        self.read_ahead_bytes = 0
        self.live_bytes = 0
        self.peak_live_bytes = 0
        self.peak_counted_bytes = 0
        self.live_chunks: set[tuple[str, int]] = set()  # (key, index)
        self._lock = threading.Lock()

    def get_into(
        self,
        key: str,
        start: int,
        buffers: Sequence[memoryview],
        on_filled: Filled = nothing_filled,
    ) -> int:
        landed = super().get_into(key, start, buffers, on_filled)
        if not threading.current_thread().name.startswith("tier-ahead"):
            return landed
        assert self.reader is not None
        counted = self.reader.read_ahead_memory_held_bytes  # not under our lock: a buffer
        with self._lock:  # dies (``_freed``) under the reader's
            self.read_ahead_gets += 1
            self.read_ahead_bytes += landed
            self.live_bytes += landed
            self.peak_live_bytes = max(self.peak_live_bytes, self.live_bytes)
            self.peak_counted_bytes = max(self.peak_counted_bytes, counted)
            first = start // CHUNK
            self.live_chunks.update((key, first + at) for at in range(len(buffers)))
        for at, chunk in enumerate(buffers):  # the views the reader keeps as its chunks
            weakref.finalize(chunk, self._freed, key, first + at, len(chunk))
        return landed

    def _freed(self, key: str, index: int, size: int) -> None:
        with self._lock:
            self.live_bytes -= size
            self.live_chunks.discard((key, index))


def test_many_concurrent_readers_never_hold_more_read_ahead_memory_than_the_limit(
    tmp_path: Path,
) -> None:
    """Read-ahead's memory over all readers (room for its GETs in flight, chunks landed
    and not read, those pushed out on their way to the disk cache) never exceeds
    ``read_ahead_memory_bytes``, readers that stop half-way leaving chunks behind
    included. The count is honest: the read-ahead bytes alive are at most that, the
    recent chunks kept in memory (``TAIL_CHUNKS``), the one chunk each reader holds
    while it reads (a chunk is its own buffer: holding one never keeps a whole GET's
    answer alive) and the chunks readers waited for that wait for the disk cache's
    writer (``WRITE_BEHIND_CHUNKS``)."""
    store = ReadAheadLedgerStore(tmp_path / "tier")
    readers, chunks = 6, 200
    bodies = {f"seg{n}": random.Random(n).randbytes(chunks * CHUNK) for n in range(readers)}
    for key, body in bodies.items():
        store.put(key, body)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 24, max_entries=10_000)
    limit = 10 * CHUNK
    reader = RangeReader(
        store, cache, prefetch_chunks=2, max_prefetch_chunks=64, threads=8,
        read_ahead_memory_bytes=limit,
    )  # fmt: skip
    store.reader = reader
    failures: list[BaseException] = []

    def read_front_to_back(key: str, stop_at_chunk: int) -> None:
        body = bodies[key]
        try:
            for start in range(0, stop_at_chunk * CHUNK, CHUNK):  # one chunk per read
                end = start + CHUNK
                assert reader.read(key, start, end, len(body)) == body[start:end]
        except BaseException as error:  # reported by the test's thread
            failures.append(error)

    threads = [
        threading.Thread(target=read_front_to_back, args=(key, chunks // (1 + n % 2)))
        for n, key in enumerate(bodies)
    ]  # every other reader stops half-way, leaving what was read ahead for it unread
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        wait_until(lambda: all(reader.in_flight(key) == [] for key in bodies))
        # Read-ahead at work, whatever the scheduling (how many reads it served is not:
        # on a loaded machine readers catch up with it): each reader's first read, from
        # its object's start, asks for a whole GET's worth, which is all the memory.
        assert store.read_ahead_bytes >= readers * limit
        assert 0 < store.peak_counted_bytes <= limit
        kept_chunks = TAIL_CHUNKS + readers + WRITE_BEHIND_CHUNKS
        assert store.peak_live_bytes <= limit + kept_chunks * CHUNK
        assert store.live_bytes <= reader.read_ahead_memory_held_bytes + TAIL_CHUNKS * CHUNK
    finally:
        reader.close()


class SubmitterDescheduledPool(ThreadPoolExecutor):
    """Read-ahead's pool (real threads), its submitter held after handing over its
    ``stall_at``-th GET until that GET has been made (``stalled`` is set then) and
    ``resume`` is set: a reader thread descheduled in the middle of issuing its
    read-ahead, as on a loaded machine."""

    def __init__(
        self, store: ReadAheadLedgerStore, stall_at: int, resume: threading.Event | None = None
    ):
        super().__init__(4, thread_name_prefix="tier-ahead")
        self.store, self.stall_at, self.submitted = store, stall_at, 0
        self.stalled = threading.Event()
        if resume is None:  # held only until the GET is made
            resume = threading.Event()
            resume.set()
        self.resume = resume

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        self.submitted += 1
        if self.submitted == self.stall_at:
            wait_until(lambda: self.store.read_ahead_gets == self.stall_at)
            self.stalled.set()
            self.resume.wait(10)
        return future


def test_chunks_pushed_out_of_memory_die_while_the_reader_that_asked_for_them_is_descheduled(
    tmp_path: Path,
) -> None:
    """A read's read-ahead of two GETs' worth with memory for one: the second GET's
    room is made by pushing the first's chunks out to the disk cache, and those die
    then, even while the reader that issued both GETs has not yet run on (it held
    them through the fetches it kept until it did: twice the limit alive)."""
    store = ReadAheadLedgerStore(tmp_path / "tier")
    body = random.Random(1).randbytes(40 * CHUNK)
    store.put("seg", body)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 20, max_entries=100)
    limit = 10 * CHUNK
    reader = RangeReader(
        store, cache, prefetch_chunks=20, max_prefetch_chunks=20, read_ahead_memory_bytes=limit
    )
    store.reader = reader
    reader._ahead_pool.shutdown()
    reader._ahead_pool = SubmitterDescheduledPool(store, stall_at=2)  # chunks 1-10, 11-20
    try:
        assert reader.read("seg", 0, CHUNK, len(body)) == body[:CHUNK]
        wait_until(lambda: reader.in_flight("seg") == [])
        assert store.read_ahead_gets == 2
        assert store.peak_live_bytes <= limit
    finally:
        reader.close()


def test_a_chunk_pushed_out_of_memory_dies_while_the_reader_that_read_it_ahead_is_descheduled(
    tmp_path: Path,
) -> None:
    """A reader descheduled right after issuing its read-ahead GET holds nothing of the
    answer: when another reader's read-ahead pushes those chunks out to the disk cache,
    every one of them dies then. (The issuer's loop over the chunks coming left its
    variable on the last one's future, and through it the chunk, alive and no longer
    counted until the issuer ran on.)"""
    store = ReadAheadLedgerStore(tmp_path / "tier")
    bodies = put_objects(store, ("seg", "other"), 20)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 20, max_entries=100)
    reader = RangeReader(
        store, cache, prefetch_chunks=10, max_prefetch_chunks=10, read_ahead_memory_bytes=10 * CHUNK
    )
    store.reader = reader
    resume = threading.Event()
    reader._ahead_pool.shutdown()
    reader._ahead_pool = pool = SubmitterDescheduledPool(store, stall_at=1, resume=resume)
    read: list[bytes] = []
    reading = threading.Thread(target=lambda: read.append(reader.read("seg", 0, CHUNK, 20 * CHUNK)))
    try:
        reading.start()  # from the start: chunk 0, then 1-10 ahead in one GET, all of memory
        assert pool.stalled.wait(10)
        assert reader.read("other", 0, CHUNK, 20 * CHUNK) == bodies["other"][:CHUNK]
        wait_until(lambda: reader.in_flight("other") == [])  # its read-ahead, all of memory
        wait_until(lambda: reader.in_flight("seg") == [])  # pushed out: written to disk
        assert [index for index in range(20) if cache.contains("seg", index)] == list(range(11))
        assert sorted(index for key, index in store.live_chunks if key == "seg") == []
    finally:
        resume.set()
        reading.join(10)
        reader.close()
    assert read == [bodies["seg"][:CHUNK]]


def test_random_readers_filling_the_cache_evict_nothing_a_sequential_reader_will_read(
    tmp_path: Path, store: RecordingStore
) -> None:
    """A random reader churning the cache (evicting all the while) takes none of the
    chunks read ahead for two sequential readers: one's in memory, the other's pushed
    out of memory into the read-ahead share; both read on with no GET of their own."""
    bodies = put_objects(store, ("s1", "s2"), 12)
    scattered = random.Random(9).randbytes(40 * CHUNK)
    store.put("rnd", scattered)
    share = 8 * (CHUNK + TRAILER)
    cache = ChunkCache(
        tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=share + 4 * (CHUNK + TRAILER),
        max_entries=100, read_ahead_max_bytes=share,
    )  # fmt: skip
    reader = RangeReader(
        store, cache, prefetch_chunks=8, max_prefetch_chunks=8, read_ahead_memory_bytes=8 * CHUNK
    )
    try:
        for key in ("s1", "s2"):  # chunk 0, then 1-8 ahead in one GET; s2's push s1's out
            assert reader.read(key, 0, 10, 12 * CHUNK) == bodies[key][:10]
            wait_until(lambda: reader.in_flight(key) == [])  # noqa: B023
        wait_until(lambda: reader.in_flight("s1") == [])
        assert cache.stats().read_ahead_bytes == 8 * (CHUNK + TRAILER)
        jumps = random.Random(10).sample(range(1, 40, 3), 13)  # none continues another
        for index in jumps:
            start = index * CHUNK + 7
            assert (
                reader.read("rnd", start, start + 50, len(scattered))
                == scattered[start : start + 50]
            )
        wait_until(lambda: reader.in_flight("rnd") == [])
        assert cache.stats().evictions > 0
        store.gets.clear()
        for key in ("s1", "s2"):
            assert reader.read(key, 10, 8 * CHUNK, 12 * CHUNK) == bodies[key][10 : 8 * CHUNK]
        assert [get for get in store.gets if get[1] < 8 * CHUNK] == []
        assert cache.stats().read_ahead_evicted_unread == 0
    finally:
        reader.close()


def test_random_readers_never_push_a_sequential_readers_chunk_out_of_memory(
    tmp_path: Path, store: RecordingStore
) -> None:
    """A sequential reader's next read starts in the chunk its last one ended in, which
    it took from read-ahead's memory (never written to the disk cache); random readers,
    however many, keep none of their chunks in memory (theirs are in the disk cache),
    so that chunk is still there: no second GET of it."""
    body = random.Random(11).randbytes(40 * CHUNK)
    scattered = random.Random(12).randbytes(100 * CHUNK)
    store.put("seq", body)
    store.put("rnd", scattered)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 24, max_entries=1000)
    reader = RangeReader(store, cache, prefetch_chunks=2, max_prefetch_chunks=8)
    try:
        assert reader.read("seq", 0, 10, len(body)) == body[:10]  # chunk 0; 1-8 ahead
        wait_until(lambda: reader.in_flight("seq") == [])
        assert reader.read("seq", 10, 2 * CHUNK - 100, len(body)) == body[10 : 2 * CHUNK - 100]
        assert not cache.contains("seq", 1)  # taken from read-ahead's memory, read once
        for index in random.Random(13).sample(range(1, 100, 3), 2 * TAIL_CHUNKS):
            start = index * CHUNK + 7  # none continues another: each a random read
            assert (
                reader.read("rnd", start, start + 50, len(scattered))
                == scattered[start : start + 50]
            )
        wait_until(lambda: reader.in_flight("rnd") == [])
        store.gets.clear()
        start = 2 * CHUNK - 200  # back into chunk 1, on into 2 (read ahead)
        assert reader.read("seq", start, start + CHUNK, len(body)) == body[start : start + CHUNK]
        assert [get for get in store.gets if get[0] == "seq" and get[1] < 3 * CHUNK] == []
    finally:
        reader.close()


class SlowAnswerStore(LocalDirectoryStore):
    """The real local store whose answers of more than one chunk (read-ahead's) stop
    after their first chunk until ``go``."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.go = threading.Event()
        self.answering = 0

    def get_into(
        self,
        key: str,
        start: int,
        buffers: Sequence[memoryview],
        on_filled: Filled = nothing_filled,
    ) -> int:
        def filled(index: int) -> None:
            on_filled(index)
            if index == 0 and len(buffers) > 1:
                self.go.wait(10)

        self.answering += 1
        try:
            return super().get_into(key, start, buffers, filled)
        finally:
            self.answering -= 1


def test_a_chunk_goes_to_its_reader_as_soon_as_its_bytes_are_in_not_with_its_get(
    tmp_path: Path,
) -> None:
    """A reader reads behind a read-ahead GET as behind one stream: the chunk it waits
    for is handed over once its bytes have landed, while the rest of the GET's answer
    is still coming (with 20 ms to a store's first byte, waiting for a whole 8 MiB
    answer was most of a cold read's time)."""
    store = SlowAnswerStore(tmp_path / "tier")
    body = random.Random(14).randbytes(40 * CHUNK)
    store.put("seg", body)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 24, max_entries=1000)
    reader = RangeReader(store, cache, prefetch_chunks=2, max_prefetch_chunks=8)
    try:
        assert reader.read("seg", 0, 500, len(body)) == body[:500]  # chunk 0; 1-8 ahead
        wait_until(lambda: reader.in_flight("seg") == list(range(2, 9)))  # 1 landed
        assert reader.read("seg", 500, CHUNK + 500, len(body)) == body[500 : CHUNK + 500]
        assert store.answering == 1  # the GET of 1-8 is still answering
        store.go.set()
        wait_until(lambda: reader.in_flight("seg") == [])
        assert reader.read("seg", 500, 9 * CHUNK, len(body)) == body[500 : 9 * CHUNK]
    finally:
        store.go.set()
        reader.close()


def test_a_chunk_read_while_its_get_is_answering_keeps_its_room_until_the_answer_is_in(
    tmp_path: Path,
) -> None:
    """A chunk goes to its reader as soon as its bytes land, but its GET holds every
    buffer of the answer until the answer is in: the chunk's room in read-ahead's memory
    is given back then, not when it is read. Given back at the read, a reader that read
    on (the chunk no longer a recent one) left it alive and uncounted while other GETs
    took its room: on a loaded machine, GETs descheduled mid-answer, six readers held
    several times the limit."""
    store = SlowAnswerStore(tmp_path / "tier")
    body = random.Random(15).randbytes(40 * CHUNK)
    store.put("seg", body)
    other = random.Random(16).randbytes(TAIL_CHUNKS * CHUNK)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 24, max_entries=1000)
    for index in range(TAIL_CHUNKS):  # another object's chunks, all on disk: no GET
        cache.put("other", index, other[index * CHUNK : (index + 1) * CHUNK])
    limit = 10 * CHUNK
    reader = RangeReader(
        store, cache, prefetch_chunks=2, max_prefetch_chunks=10, read_ahead_memory_bytes=limit
    )
    try:
        assert reader.read("seg", 0, CHUNK, len(body)) == body[:CHUNK]  # chunk 0; 1-10 ahead
        wait_until(lambda: reader.in_flight("seg") == list(range(2, 11)))  # 1 landed
        assert reader.read("seg", CHUNK, 2 * CHUNK, len(body)) == body[CHUNK : 2 * CHUNK]
        for start in range(0, len(other), CHUNK):  # reading on: chunk 1 is no recent one
            assert (
                reader.read("other", start, start + CHUNK, len(other))
                == other[start : start + CHUNK]
            )
        assert store.answering == 1
        assert reader.read_ahead_memory_held_bytes == limit  # the whole answer is alive
        store.go.set()
        wait_until(lambda: reader.in_flight("seg") == [])
        wait_until(lambda: reader.read_ahead_memory_held_bytes == 9 * CHUNK)  # 2-10, unread
    finally:
        store.go.set()
        reader.close()


def test_a_reader_stepping_back_into_a_chunk_read_ahead_and_read_gets_it_without_a_get(
    tmp_path: Path, store: RecordingStore
) -> None:
    """The offset index sends a reader's next read a little back, into a chunk it took
    from read-ahead's memory (never written to the disk cache): still no second GET."""
    body = random.Random(7).randbytes(12 * CHUNK)
    store.put("seg", body)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 20, max_entries=100)
    reader = RangeReader(store, cache, prefetch_chunks=8, max_prefetch_chunks=8)
    try:
        assert reader.read("seg", 0, 10, len(body)) == body[:10]  # 1-8 read ahead
        wait_until(lambda: reader.in_flight("seg") == [])
        assert reader.read("seg", 10, 3 * CHUNK + 10, len(body)) == body[10 : 3 * CHUNK + 10]
        wait_until(lambda: reader.in_flight("seg") == [])
        store.gets.clear()
        back = CHUNK + CHUNK // 2  # in chunk 1: neither read ended there
        assert reader.read("seg", back, back + 100, len(body)) == body[back : back + 100]
        assert store.gets == []
    finally:
        reader.close()


class StuckWriterCache(ChunkCache):
    """The real disk cache, its writes from the reader's writer thread held until
    ``go``: a cache disk slower than the reads, or the writer starved of CPU."""

    def __init__(self, directory: Path):
        super().__init__(directory, chunk_bytes=CHUNK, max_bytes=1 << 24, max_entries=1000)
        self.go = threading.Event()

    def put(self, key: str, index: int, data: Any, *, read_ahead: bool = False) -> None:
        if threading.current_thread().name.startswith("tier-cache-write"):
            self.go.wait(10)
        super().put(key, index, data, read_ahead=read_ahead)


def test_chunks_waiting_for_a_slow_cache_disk_are_few_the_reader_writes_beyond_them(
    tmp_path: Path, store: RecordingStore
) -> None:
    """A chunk a reader waited for goes to the disk cache after the reader has it, but
    only ``WRITE_BEHIND_CHUNKS`` wait for the writer: beyond them, the reader writes its
    own. Queued without bound, a writer behind the reads (a slow disk, a loaded
    machine) kept every chunk read since alive (each a fetch in flight until written),
    read-ahead's among them: six readers held 26 chunks past its limit."""
    body = random.Random(17).randbytes(40 * CHUNK)
    store.put("seg", body)
    cache = StuckWriterCache(tmp_path / "cache")
    reader = RangeReader(store, cache, prefetch_chunks=0)
    try:
        for index in range(0, 40, 2):  # random reads: each GETs its own chunk
            start = index * CHUNK
            assert reader.read("seg", start, start + 10, len(body)) == body[start : start + 10]
        assert len(reader.in_flight("seg")) == WRITE_BEHIND_CHUNKS  # the rest are on disk
        cache.go.set()
        wait_until(lambda: reader.in_flight("seg") == [])
        assert all(cache.contains("seg", index) for index in range(0, 40, 2))
    finally:
        cache.go.set()
        reader.close()


def test_readers_of_a_chunk_being_fetched_wait_for_that_one_get(
    store: RecordingStore, reader: RangeReader
) -> None:
    store.put("seg", b"s" * 3000)
    store.gate.clear()
    answers: list[bytes] = []
    threads = [
        threading.Thread(target=lambda: answers.append(reader.read("seg", 100, 200, 3000)))
        for _ in range(5)
    ]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(store.gets) >= 1)
    time.sleep(0.1)  # let the other readers arrive and find the fetch in flight
    store.gate.set()
    for thread in threads:
        thread.join()
    assert answers == [b"s" * 100] * 5
    assert store.gets == [("seg", 0, 1000)]


def test_every_get_is_observed_with_its_latency_bytes_or_error(
    tmp_path: Path, store: RecordingStore
) -> None:
    seen: list[tuple[float, int, BaseException | None]] = []
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 20, max_entries=100)
    reader = RangeReader(
        store, cache, prefetch_chunks=0, on_fetch=lambda s, n, e: seen.append((s, n, e))
    )
    store.put("seg", b"x" * 1500)
    reader.read("seg", 0, 1500, 1500)
    with pytest.raises(ObjectNotFoundError):
        reader.read("gone", 0, 10, 100)
    reader.close()
    assert sorted(n for _, n, _ in seen) == [-1, 1500]  # chunks 0-1 in one GET
    assert all(seconds >= 0 for seconds, _, _ in seen)
    assert [type(e) for _, n, e in seen if n < 0] == [ObjectNotFoundError]


def test_an_object_shorter_than_its_metadata_is_an_error_not_a_short_read(
    store: RecordingStore, reader: RangeReader
) -> None:
    store.put("seg", b"short")
    with pytest.raises(ObjectStoreError, match="shorter than its metadata"):
        reader.read("seg", 0, 100, 2000)
    assert not reader.cache.contains("seg", 0)


def test_a_sequential_reader_reads_ahead_deeper_with_each_read_a_random_one_not_at_all(
    tmp_path: Path, store: RecordingStore
) -> None:
    body = random.Random(3).randbytes(100 * CHUNK)
    store.put("seg", body)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 24, max_entries=1000)
    reader = RangeReader(store, cache, prefetch_chunks=2, max_prefetch_chunks=16, threads=2)

    def read_chunk(index: int) -> None:
        """Read inside chunk ``index`` (put in the cache first: the GETs seen are read-ahead's)."""
        if not cache.contains("seg", index):
            cache.put("seg", index, body[index * CHUNK : (index + 1) * CHUNK])
        start = index * CHUNK + 10
        assert reader.read("seg", start, start + 500, len(body)) == body[start : start + 500]

    def settle() -> None:
        store.gate.set()
        wait_until(lambda: reader.in_flight("seg") == [])
        store.gate.clear()
        store.gets.clear()

    try:
        store.gate.clear()  # read-ahead GETs wait: what a read started shows in flight
        read_chunk(50)
        assert reader.in_flight("seg") == []  # a first read in the middle: maybe random
        read_chunk(51)
        assert reader.in_flight("seg") == [52, 53]  # it continued: the first window
        settle()
        read_chunk(52)
        assert reader.in_flight("seg") == [54, 55, 56]  # 4 ahead, 53 already there
        settle()
        read_chunk(53)  # 8 ahead: 57-61 missing, one GET (57-56 cached, 53+8 = 61)
        assert reader.in_flight("seg") == [57, 58, 59, 60, 61]
        wait_until(lambda: store.gets == [("seg", 57 * CHUNK, 62 * CHUNK)])
        settle()
        read_chunk(20)  # a jump: no read-ahead, and no GET beyond its own
        read_chunk(90)
        assert reader.in_flight("seg") == [] and store.gets == []
        read_chunk(0)  # an object's start: a sequential reader's, one GET's worth ahead
        assert reader.in_flight("seg") == list(range(1, 17))
        settle()
        assert cache.stats().read_ahead_hits == 2  # chunks 52 and 53, read ahead, then read
    finally:
        store.gate.set()
        reader.close()


def test_a_reader_with_chunks_coming_never_pushes_another_readers_unread_chunks_out(
    tmp_path: Path, store: RecordingStore
) -> None:
    """Readers of many partitions at once share read-ahead's memory: one whose chunks are
    still coming deepens its window only into free memory, never by pushing another
    reader's unread chunks out to disk (to be read back: a GET's CPU again); once it
    has nothing coming, its window is read ahead whatever room that takes."""
    bodies = put_objects(store, ("a", "b"), 40)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 24, max_entries=1000)
    reader = RangeReader(
        store, cache, prefetch_chunks=2, max_prefetch_chunks=8, threads=2,
        read_ahead_memory_bytes=10 * CHUNK,
    )  # fmt: skip

    def read_a(index: int) -> None:
        """Read inside chunk ``index`` of a (put in the cache first: the GETs seen are
        read-ahead's)."""
        if not cache.contains("a", index):
            cache.put("a", index, bodies["a"][index * CHUNK : (index + 1) * CHUNK])
        start = index * CHUNK + 10
        assert reader.read("a", start, start + 500, 40 * CHUNK) == bodies["a"][start : start + 500]

    def settle() -> list[tuple[str, int, int | None]]:
        """The GETs since the last settle, once none is in flight."""
        wait_until(lambda: reader.in_flight("a") == [] and reader.in_flight("b") == [])
        gets = list(store.gets)
        store.gets.clear()
        return gets

    try:
        assert reader.read("b", 0, 10, 40 * CHUNK) == bodies["b"][:10]  # b: 1-8 ahead
        settle()
        read_a(20)
        read_a(21)  # a continues: 22-23 ahead, and memory is full
        settle()
        assert reader.read_ahead_memory_held_bytes == 10 * CHUNK
        read_a(22)  # 23 still to come: 24-26 would need b's unread chunks' memory
        assert settle() == []
        assert [index for index in range(9) if cache.contains("b", index)] == [0]  # no spill
        assert reader.read("b", 10, 9 * CHUNK, 40 * CHUNK) == bodies["b"][10 : 9 * CHUNK]
        assert [get for get in store.gets if get[0] == "b" and get[1] < 9 * CHUNK] == []
        assert cache.stats().read_ahead_bytes == 0  # nothing was pushed out
        settle()
        read_a(23)  # nothing coming for a now: its window is read ahead, room made
        wait_until(lambda: ("a", 24 * CHUNK, 32 * CHUNK) in store.gets)
    finally:
        reader.close()


def test_closing_the_reader_during_read_ahead_leaves_no_fetch_behind(
    tmp_path: Path, store: RecordingStore
) -> None:
    body = bytes(40 * CHUNK)
    store.put("seg", body)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 24, max_entries=1000)
    reader = RangeReader(store, cache, prefetch_chunks=8, max_prefetch_chunks=8, threads=1)
    cache.put("seg", 0, body[:CHUNK])
    store.gate.clear()
    reader.read("seg", 0, 10, len(body))  # from the start: 8 chunks ahead, held at the gate
    assert reader.in_flight("seg") == list(range(1, 9))
    waiting: list[bytes | BaseException] = []

    def read_chunk_5() -> None:
        try:
            waiting.append(reader.read("seg", 5 * CHUNK, 5 * CHUNK + 10, len(body)))
        except ObjectStoreError as error:
            waiting.append(error)

    reader_thread = threading.Thread(target=read_chunk_5)
    reader_thread.start()
    closing = threading.Thread(target=reader.close)
    closing.start()
    store.gate.set()  # the GET running finishes; the ones queued are dropped
    closing.join(10)
    reader_thread.join(10)
    assert not closing.is_alive() and not reader_thread.is_alive()
    assert reader.in_flight("seg") == []
    assert waiting and (waiting[0] == bytes(10) or isinstance(waiting[0], ObjectStoreError))
    assert not [t for t in threading.enumerate() if t.name.startswith(("tier-ahead", "tier-fetch"))]


@pytest.mark.go_tools
def test_a_sequential_read_from_minio_gives_every_byte_in_order_within_the_cache_limit(
    tmp_path: Path, minio: MinioServer, s3_bucket: str
) -> None:
    """Through a real S3 store: reads of random lengths front to back, read-ahead deep and
    in multi-chunk GETs, each answer the object's bytes; the cache never above its limit."""
    s3 = minio_store(minio, s3_bucket, tmp_path)
    body = random.Random(4).randbytes(3 << 20)
    s3.put("segment", body)
    chunk = 16 << 10
    limit = 40 * (chunk + TRAILER)
    cache = ChunkCache(
        tmp_path / "cache", chunk_bytes=chunk, max_bytes=limit, max_entries=1000,
        read_ahead_max_bytes=20 * (chunk + TRAILER),
    )  # fmt: skip
    reader = RangeReader(s3, cache, prefetch_chunks=2, max_prefetch_chunks=16, threads=4)
    rng = random.Random(5)
    position = 0
    try:
        while position < len(body):
            end = position + rng.randint(1, 3 * chunk)
            assert reader.read("segment", position, end, len(body)) == body[position:end]
            assert cache.size_bytes <= limit
            assert disk_bytes(tmp_path / "cache") <= limit
            position = end
    finally:
        reader.close()
        s3.close()
    stats = cache.stats()
    assert stats.read_ahead_hits > 100 and stats.read_ahead_evicted_unread == 0
