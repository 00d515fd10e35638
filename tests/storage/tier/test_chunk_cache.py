"""The tier's disk cache of chunks: bounds, LRU eviction, restarts, torn and flipped files."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.support.small_disk import fill_leaving, small_disk_at
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.tier.chunk_cache import ChunkCache

TRAILER = 12  # magic, length, CRC-32C after each chunk's data


def cache(directory: Path, *, max_bytes: int = 1 << 20, max_entries: int = 100) -> ChunkCache:
    return ChunkCache(directory, chunk_bytes=64, max_bytes=max_bytes, max_entries=max_entries)


def chunk_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.chunk"))


def test_a_put_chunk_is_a_hit_and_anything_else_a_miss(tmp_path: Path) -> None:
    chunks = cache(tmp_path)
    chunks.put("seg/a", 0, b"A" * 64)
    chunks.put("seg/a", 1, b"tail")
    assert chunks.get("seg/a", 0) == b"A" * 64
    assert chunks.get("seg/a", 1) == b"tail"
    assert chunks.get("seg/a", 2) is None
    assert chunks.get("seg/b", 0) is None
    stats = chunks.stats()
    assert (stats.hits, stats.misses, stats.entries) == (2, 2, 2)
    assert stats.size_bytes == 64 + 4 + 2 * TRAILER == chunks.size_bytes


def test_the_entry_bound_evicts_the_least_recently_used(tmp_path: Path) -> None:
    chunks = cache(tmp_path, max_entries=3)
    for index in range(3):
        chunks.put("k", index, bytes([index]) * 10)
    assert chunks.get("k", 0) is not None  # 0 is now the most recent; 1 the least
    chunks.put("k", 3, b"new")
    assert [chunks.contains("k", i) for i in range(4)] == [True, False, True, True]
    assert chunks.entries == 3 == len(chunk_files(tmp_path))
    assert chunks.stats().evictions == 1


def test_the_byte_bound_holds_and_counts_the_trailers(tmp_path: Path) -> None:
    chunks = cache(tmp_path, max_bytes=3 * (50 + TRAILER))
    for index in range(5):
        chunks.put("k", index, b"x" * 50)
    assert chunks.size_bytes == 3 * (50 + TRAILER)
    assert sum(path.stat().st_size for path in chunk_files(tmp_path)) == chunks.size_bytes
    assert [chunks.contains("k", i) for i in range(5)] == [False, False, True, True, True]


def test_a_chunk_larger_than_the_whole_cache_is_not_cached(tmp_path: Path) -> None:
    chunks = cache(tmp_path, max_bytes=100)
    chunks.put("k", 0, b"y" * 200)
    assert chunks.get("k", 0) is None
    assert chunk_files(tmp_path) == []


def test_a_restart_keeps_the_chunks_and_their_lru_order(tmp_path: Path) -> None:
    chunks = cache(tmp_path)
    for index in range(3):
        chunks.put("k", index, bytes([index]) * 20)
    for number, path in enumerate(chunk_files(tmp_path)):  # distinct ages, whatever the clock
        os.utime(path, (1_000 + number, 1_000 + number))
    assert chunks.get("k", 0) == bytes([0]) * 20  # touched: the most recent now
    restarted = cache(tmp_path, max_entries=2)  # a smaller bound evicts the oldest on load
    assert restarted.get("k", 0) == bytes([0]) * 20
    assert [restarted.contains("k", i) for i in range(3)] == [True, False, True]
    assert restarted.entries == 2
    assert restarted.size_bytes == 2 * (20 + TRAILER)


def test_a_torn_file_is_discarded_at_start(tmp_path: Path) -> None:
    chunks = cache(tmp_path)
    chunks.put("k", 0, b"z" * 64)
    chunks.put("k", 1, b"w" * 64)
    (torn,) = [p for p in chunk_files(tmp_path) if p.name.endswith(".1.chunk")]
    with torn.open("r+b") as file:  # a crash after the rename, before the data reached disk
        file.truncate(40)
    (tmp_path / "0123abcd.tmp").write_bytes(b"an unfinished write")
    restarted = cache(tmp_path)
    assert restarted.get("k", 0) == b"z" * 64
    assert restarted.get("k", 1) is None
    assert not torn.exists()
    assert not (tmp_path / "0123abcd.tmp").exists()
    assert restarted.stats().discarded == 1


def test_a_flipped_byte_is_caught_by_the_crc_on_read_and_the_chunk_dropped(
    tmp_path: Path,
) -> None:
    chunks = cache(tmp_path)
    chunks.put("k", 0, b"q" * 64)
    (path,) = chunk_files(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[10] ^= 0x01
    path.write_bytes(raw)
    assert chunks.get("k", 0) is None
    assert not path.exists()
    assert (chunks.entries, chunks.size_bytes, chunks.stats().discarded) == (0, 0, 1)


def test_a_different_chunk_size_orphans_the_old_chunks(tmp_path: Path) -> None:
    cache(tmp_path).put("k", 0, b"old")
    bigger = ChunkCache(tmp_path, chunk_bytes=128, max_bytes=1 << 20, max_entries=10)
    assert bigger.get("k", 0) is None
    assert chunk_files(tmp_path) == []


def test_bounds_must_make_sense(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError):
        ChunkCache(tmp_path, chunk_bytes=0, max_bytes=10, max_entries=10)
    with pytest.raises(InvalidConfigError):
        ChunkCache(tmp_path, chunk_bytes=10, max_bytes=-1, max_entries=10)


def test_concurrent_readers_and_writers_keep_the_bounds_and_the_bytes(tmp_path: Path) -> None:
    chunks = cache(tmp_path, max_bytes=40 * (64 + TRAILER), max_entries=40)
    wrong: list[tuple[int, int]] = []

    def work(worker: int) -> None:
        for round_ in range(200):
            index = (worker * 7 + round_) % 60
            data = bytes([index]) * 64
            chunks.put("k", index, data)
            got = chunks.get("k", (index + 3) % 60)
            if got is not None and got != bytes([(index + 3) % 60]) * 64:
                wrong.append((worker, index))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
    files = chunk_files(tmp_path)
    assert chunks.entries == len(files) <= 40
    assert chunks.size_bytes == sum(path.stat().st_size for path in files)
    assert list(tmp_path.glob("*.tmp")) == []


PAGE = 4096  # a chunk file of exactly one tmpfs page: data plus the trailer


def test_a_full_cache_makes_room_before_it_writes_so_a_disk_of_its_size_never_overflows(
    tmp_path: Path,
) -> None:
    """The byte limit holds on disk at every moment, not only after each put: a cache
    whose disk has room for exactly ``max_bytes`` keeps caching new chunks."""
    with small_disk_at(tmp_path / "disk", "256k") as disk:
        chunks = ChunkCache(
            disk / "cache", chunk_bytes=PAGE - TRAILER, max_bytes=4 * PAGE, max_entries=100
        )
        fill_leaving(disk, 4 * PAGE)
        for index in range(12):
            data = bytes([index]) * (PAGE - TRAILER)
            chunks.put("k", index, data)
            assert chunks.get("k", index) == data, f"chunk {index} was not cached"
            assert chunks.size_bytes <= 4 * PAGE
        assert chunks.stats().evictions == 8


def test_chunks_read_ahead_are_not_evicted_by_random_reads(tmp_path: Path) -> None:
    """Read-ahead chunks wait in their own share of the cache until read; chunks a random
    reader brings in evict only each other (and chunks already read)."""
    chunks = ChunkCache(
        tmp_path, chunk_bytes=64, max_bytes=8 * (64 + TRAILER), max_entries=100,
        read_ahead_max_bytes=4 * (64 + TRAILER),
    )  # fmt: skip
    for index in range(4):
        chunks.put("sequential", index, b"s" * 64, read_ahead=True)
    for index in range(50):
        chunks.put("random", index, b"r" * 64)
    assert [chunks.contains("sequential", i) for i in range(4)] == [True] * 4
    assert chunks.size_bytes <= 8 * (64 + TRAILER)
    assert chunks.get("sequential", 0) == b"s" * 64  # read: now an ordinary chunk
    stats = chunks.stats()
    assert (stats.read_ahead_hits, stats.read_ahead_bytes) == (1, 3 * (64 + TRAILER))
    for index in range(50, 60):
        chunks.put("random", index, b"r" * 64)
    assert [chunks.contains("sequential", i) for i in range(4)] == [False, True, True, True]


def test_read_ahead_beyond_its_share_evicts_the_oldest_unread_read_ahead(tmp_path: Path) -> None:
    chunks = ChunkCache(
        tmp_path, chunk_bytes=64, max_bytes=8 * (64 + TRAILER), max_entries=100,
        read_ahead_max_bytes=2 * (64 + TRAILER),
    )  # fmt: skip
    chunks.put("random", 0, b"r" * 64)
    for index in range(3):
        chunks.put("sequential", index, b"s" * 64, read_ahead=True)
    assert [chunks.contains("sequential", i) for i in range(3)] == [False, True, True]
    assert chunks.contains("random", 0)
    assert chunks.stats().read_ahead_evicted_unread == 1
