"""Chunked ranged reads through the cache: exact bytes, one GET per chunk, prefetch."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.range_reader import RangeReader
from tierlog.storage.tier.store import ObjectNotFoundError, ObjectStoreError

CHUNK = 1000


class RecordingStore(LocalDirectoryStore):
    """The real local store, remembering each ranged GET; ``gate`` holds GETs back."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.gets: list[tuple[str, int, int | None]] = []
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        with self._lock:
            self.gets.append((key, start, end))
        self.gate.wait(10)
        return super().get(key, start, end)


@pytest.fixture
def store(tmp_path: Path) -> RecordingStore:
    return RecordingStore(tmp_path / "tier")


@pytest.fixture
def reader(tmp_path: Path, store: RecordingStore) -> Iterator[RangeReader]:
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 24, max_entries=1000)
    reader = RangeReader(store, cache, prefetch_chunks=0)
    yield reader
    reader.close()


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


def test_gets_are_whole_chunks_once_each_then_the_cache_answers(
    store: RecordingStore, reader: RangeReader
) -> None:
    body = bytes(range(256)) * 20  # 5120 bytes: chunks 0..4, the last one 120 bytes
    store.put("seg", body)
    assert reader.read("seg", 1500, 3100, len(body)) == body[1500:3100]
    assert sorted(store.gets) == [("seg", 1000, 2000), ("seg", 2000, 3000), ("seg", 3000, 4000)]
    store.gets.clear()
    assert reader.read("seg", 1000, 4000, len(body)) == body[1000:4000]
    assert reader.read("seg", 4000, 9999, len(body)) == body[4000:]
    assert sorted(store.gets) == [("seg", 4000, 5000), ("seg", 5000, 5120)]  # not past the end
    assert reader.cache.entries == 5


def test_the_chunks_after_a_read_are_prefetched(tmp_path: Path, store: RecordingStore) -> None:
    body = bytes(5000)
    store.put("seg", body)
    cache = ChunkCache(tmp_path / "cache", chunk_bytes=CHUNK, max_bytes=1 << 20, max_entries=100)
    reader = RangeReader(store, cache, prefetch_chunks=2)
    try:
        reader.read("seg", 0, 10, len(body))
        wait_until(lambda: cache.contains("seg", 1) and cache.contains("seg", 2))
        assert not cache.contains("seg", 3)
        store.gets.clear()
        reader.read("seg", 1000, 3000, len(body))  # both prefetched: no GET for them
        assert ("seg", 1000, 2000) not in store.gets
        assert ("seg", 2000, 3000) not in store.gets
    finally:
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
    assert sorted(n for _, n, _ in seen) == [-1, 500, 1000]
    assert all(seconds >= 0 for seconds, _, _ in seen)
    assert [type(e) for _, n, e in seen if n < 0] == [ObjectNotFoundError]


def test_an_object_shorter_than_its_metadata_is_an_error_not_a_short_read(
    store: RecordingStore, reader: RangeReader
) -> None:
    store.put("seg", b"short")
    with pytest.raises(ObjectStoreError, match="shorter than its metadata"):
        reader.read("seg", 0, 100, 2000)
    assert not reader.cache.contains("seg", 0)
