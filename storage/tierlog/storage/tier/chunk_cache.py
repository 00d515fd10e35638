"""A disk cache of fixed-size chunks of remote objects: the tier's read cache.

Remote segment objects never change once uploaded (a new upload gets a new key), so
chunk ``i`` of an object, bytes ``[i * chunk_bytes, (i + 1) * chunk_bytes)``, never
goes stale: it is cached under (object key, chunk index) and only ever evicted, least
recently used first, to stay within ``max_bytes`` and ``max_entries``. A put makes room
before it writes, so the files on disk (its temporary file included) never add up to
more than ``max_bytes``: a cache volume of that size never fills.

Chunks fetched ahead of a sequential reader that its reader's memory could not hold
(``put(..., read_ahead=True)``) wait in their own share of the cache, at most
``read_ahead_max_bytes``, until read: only other chunks read ahead evict them (the
oldest first, most likely a reader that went away), so a random reader's chunks, which
evict only ordinary chunks, never throw away what a sequential reader is about to
read. A chunk read ahead joins the ordinary chunks once it is read.

It survives restarts. Each chunk is one file named by a hash of its object key, the
chunk size and its index; at start the in-memory index is rebuilt from the directory,
oldest modification time first (a hit touches its file, so that order is the LRU
order). A chunk is written to a temporary file in one write (its bytes and trailer)
and renamed into place, without fsync (a lost chunk costs one GET); instead every file
ends with a trailer of magic, length and CRC-32C. A hit is a view of the file's bytes,
not a copy of them. Start-up discards leftovers of unfinished writes and any file whose
length disagrees with its trailer, and every hit checks the CRC, so a file torn by a
crash or flipped on disk is discarded and fetched again, never served.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import struct
import threading
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple

from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.records import crc32c

__all__ = ["Chunk", "ChunkCache", "ChunkCacheStats"]

# A chunk's bytes: a view of what a GET or a cache file brought (or that whole answer).
Chunk = bytes | memoryview

log = logging.getLogger(__name__)

_SUFFIX = ".chunk"
_TEMPORARY_SUFFIX = ".tmp"
_TRAILER = struct.Struct(">4sII")  # magic, data length, CRC-32C of the data
_MAGIC = b"TLC1"


class ChunkCacheStats(NamedTuple):
    """Counters since start, read at scrape time (no bookkeeping beyond the ints)."""

    hits: int
    misses: int
    evictions: int
    discarded: int  # torn or corrupt files thrown away
    size_bytes: int
    entries: int
    read_ahead_hits: int = 0  # chunks read ahead, then read
    read_ahead_evicted_unread: int = 0  # chunks read ahead for nothing
    read_ahead_bytes: int = 0  # of chunks read ahead, not read yet (part of size_bytes)


class ChunkCache:
    """Chunks of immutable remote objects in ``directory`` (created if missing); thread-safe."""

    def __init__(
        self,
        directory: Path,
        *,
        chunk_bytes: int,
        max_bytes: int,
        max_entries: int,
        read_ahead_max_bytes: int | None = None,
    ):
        """``read_ahead_max_bytes``: the share of ``max_bytes`` chunks read ahead may hold
        until read (default a quarter)."""
        read_ahead_max_bytes = (
            max_bytes // 4 if read_ahead_max_bytes is None else read_ahead_max_bytes
        )
        if (
            chunk_bytes <= 0
            or max_bytes < 0
            or max_entries < 0
            or not 0 <= read_ahead_max_bytes <= max_bytes
        ):
            raise InvalidConfigError(
                f"chunk cache: chunk_bytes {chunk_bytes} must be positive, "
                f"max_bytes {max_bytes} and max_entries {max_entries} not negative, "
                f"read_ahead_max_bytes {read_ahead_max_bytes} within max_bytes"
            )
        self.directory = directory
        self._directory = str(directory)
        self.chunk_bytes = chunk_bytes
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.read_ahead_max_bytes = read_ahead_max_bytes
        self._lock = threading.Lock()
        self._files: OrderedDict[str, int] = OrderedDict()  # file name -> bytes, LRU first
        self._ahead: OrderedDict[str, int] = OrderedDict()  # read ahead, unread; oldest first
        self._size_bytes = 0  # of both
        self._ahead_bytes = 0
        self._reserved_bytes = 0  # room made for puts writing their files
        self._reserved_ahead_bytes = 0
        self._writing: set[str] = set()  # chunks being written (each holds a reserved entry)
        self._hits = self._misses = self._evictions = self._discarded = 0
        self._ahead_hits = self._ahead_evicted = 0
        directory.mkdir(parents=True, exist_ok=True)
        self._load()

    # -- the index, rebuilt from the directory ---------------------------------------

    def _load(self) -> None:
        found: list[tuple[float, str, int]] = []
        for path in self.directory.iterdir():
            name = path.name
            if name.endswith(_TEMPORARY_SUFFIX):  # an unfinished write: never renamed
                path.unlink(missing_ok=True)
                continue
            if not name.endswith(_SUFFIX):
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            if not self._belongs(name) or not _trailer_matches(path, stat.st_size):
                self._discard_file(path)
                continue
            found.append((stat.st_mtime, name, stat.st_size))
        with self._lock:
            for _mtime, name, size in sorted(found):
                self._files[name] = size
                self._size_bytes += size
            self._make_room_locked(0, read_ahead=False)
        log.info(
            "chunk cache %s: %d chunks, %d bytes",
            self.directory,
            len(self._files),
            self._size_bytes,
        )

    def _belongs(self, name: str) -> bool:
        """A chunk of this chunk size (a changed ``chunk_bytes`` orphans the others)."""
        parts = name[: -len(_SUFFIX)].split(".")
        return len(parts) == 3 and parts[1] == str(self.chunk_bytes) and parts[2].isdigit()

    def _name(self, key: str, index: int) -> str:
        digest = hashlib.sha256(key.encode()).hexdigest()[:40]
        return f"{digest}.{self.chunk_bytes}.{index}{_SUFFIX}"

    # -- reads and writes ------------------------------------------------------------

    def get(self, key: str, index: int) -> Chunk | None:
        """Chunk ``index`` of object ``key``, or None (a miss)."""
        name = self._name(key, index)
        with self._lock:
            if not self._mark_read_locked(name):
                self._misses += 1
                return None
        path = f"{self._directory}/{name}"  # a str, not a Path: this is the hot path
        try:
            with open(path, "rb") as source:  # noqa: PTH123
                raw = source.read()
            os.utime(path)  # the LRU order a restart rebuilds
        except FileNotFoundError:  # evicted since the lookup
            data = None
        else:
            data = _unwrap(raw)
            if data is None:
                log.warning("chunk cache: discarding corrupt %s", path)
                self._discard(name)
        with self._lock:
            if data is None:
                self._misses += 1
            else:
                self._hits += 1
        return data

    def missed(self, chunks: int) -> None:
        """A reader wanted ``chunks`` chunks that were neither here nor in memory (fetched
        for it, or being fetched): misses it did not look up with ``get``."""
        with self._lock:
            self._misses += chunks

    def mark_read(self, key: str, index: int) -> None:
        """A reader took chunk ``index`` of ``key`` from the fetch that cached it."""
        with self._lock:
            self._mark_read_locked(self._name(key, index))

    def found_in_memory(self, key: str, index: int, *, read_ahead: bool = False) -> None:
        """A reader had chunk ``index`` of ``key`` in memory (where its last read ended,
        or ``read_ahead`` and kept there until read): a hit, as if read from here."""
        name = self._name(key, index)
        with self._lock:
            self._hits += 1
            if read_ahead and name not in self._ahead:  # else counted as it leaves ``_ahead``
                self._ahead_hits += 1
            self._mark_read_locked(name)

    def _mark_read_locked(self, name: str) -> bool:
        """Most recently used now; a chunk read ahead is read at last and becomes an
        ordinary one. False when it is not cached."""
        size = self._ahead.pop(name, None)
        if size is not None:
            self._ahead_bytes -= size
            self._files[name] = size
            self._ahead_hits += 1
            return True
        if name not in self._files:
            return False
        self._files.move_to_end(name)
        return True

    def contains(self, key: str, index: int) -> bool:
        name = self._name(key, index)
        with self._lock:
            return name in self._files or name in self._ahead

    def put(self, key: str, index: int, data: Chunk, *, read_ahead: bool = False) -> None:
        """Cache chunk ``index`` of ``key`` (``read_ahead``: fetched before anyone asked),
        first evicting what must go to fit; not cached when it cannot fit."""
        name = self._name(key, index)
        size = len(data) + _TRAILER.size
        with self._lock:
            if name in self._files or name in self._ahead or name in self._writing:
                return  # immutable: the copy there (or on its way) is this one
            if not self._make_room_locked(size, read_ahead=read_ahead):
                return
            self._reserve_locked(name, size, read_ahead)
        temporary = f"{self._directory}/{uuid.uuid4().hex}{_TEMPORARY_SUFFIX}"
        try:
            _write_file(temporary, data, _TRAILER.pack(_MAGIC, len(data), crc32c(data)))
            with self._lock:
                os.replace(temporary, f"{self._directory}/{name}")  # noqa: PTH105 (hot path)
                self._release_locked(name, size, read_ahead)
                (self._ahead if read_ahead else self._files)[name] = size
                self._size_bytes += size
                self._ahead_bytes += size if read_ahead else 0
        except OSError as error:  # a full cache disk must not fail the read it serves
            log.warning("chunk cache: cannot write %s: %s", name, error)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)  # noqa: PTH108
            with self._lock:
                self._release_locked(name, size, read_ahead)

    def _reserve_locked(self, name: str, size: int, read_ahead: bool) -> None:
        self._writing.add(name)
        self._reserved_bytes += size
        self._reserved_ahead_bytes += size if read_ahead else 0

    def _release_locked(self, name: str, size: int, read_ahead: bool) -> None:
        self._writing.discard(name)
        self._reserved_bytes -= size
        self._reserved_ahead_bytes -= size if read_ahead else 0

    def _make_room_locked(self, size: int, *, read_ahead: bool) -> bool:
        """Evict until ``size`` more bytes and one more entry fit, counting the puts still
        writing: read ahead, the oldest unread chunks read ahead while their share is
        full, then the least recently used ordinary chunks; an ordinary chunk evicts only
        ordinary chunks. False (nothing more evicted) when it cannot fit that way."""
        if read_ahead:
            if size > self.read_ahead_max_bytes:
                return False
            while self._ahead_bytes + self._reserved_ahead_bytes + size > self.read_ahead_max_bytes:
                if not self._ahead:
                    return False
                self._evict_locked(self._ahead)
                self._ahead_evicted += 1
        entries = 1 if size else 0
        while (
            self._size_bytes + self._reserved_bytes + size > self.max_bytes
            or len(self._files) + len(self._ahead) + len(self._writing) + entries > self.max_entries
        ):
            if not self._files:
                return False
            self._evict_locked(self._files)
        return True

    def _evict_locked(self, segment: OrderedDict[str, int]) -> None:
        name, size = segment.popitem(last=False)
        self._size_bytes -= size
        if segment is self._ahead:
            self._ahead_bytes -= size
        self._evictions += 1
        (self.directory / name).unlink(missing_ok=True)

    def _discard(self, name: str) -> None:
        with self._lock:
            size = self._files.pop(name, None)  # a read chunk: no longer in ``_ahead``
            if size is None:
                return
            self._size_bytes -= size
            self._discarded += 1
            (self.directory / name).unlink(missing_ok=True)

    def _discard_file(self, path: Path) -> None:
        log.warning("chunk cache: discarding torn or foreign file %s", path)
        path.unlink(missing_ok=True)
        with self._lock:
            self._discarded += 1

    # -- observation -----------------------------------------------------------------

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def entries(self) -> int:
        return len(self._files) + len(self._ahead)

    def stats(self) -> ChunkCacheStats:
        with self._lock:
            return ChunkCacheStats(
                self._hits,
                self._misses,
                self._evictions,
                self._discarded,
                self._size_bytes,
                len(self._files) + len(self._ahead),
                self._ahead_hits,
                self._ahead_evicted,
                self._ahead_bytes,
            )


def _write_file(path: str, data: Chunk, trailer: bytes) -> None:
    """A new file of ``data`` then ``trailer``, in one write."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        written = os.writev(fd, [data, trailer])
    finally:
        os.close(fd)
    if written != len(data) + len(trailer):  # short: the disk is full
        raise OSError(errno.ENOSPC, f"{written} of {len(data) + len(trailer)} bytes written")


def _unwrap(raw: bytes) -> memoryview | None:
    """The data of a cache file, or None when its trailer or CRC says it is damaged."""
    if len(raw) < _TRAILER.size:
        return None
    magic, length, crc = _TRAILER.unpack_from(raw, len(raw) - _TRAILER.size)
    data = memoryview(raw)[: -_TRAILER.size]
    if magic != _MAGIC or length != len(data) or crc32c(data) != crc:
        return None
    return data


def _trailer_matches(path: Path, size: int) -> bool:
    """The start-up check, cheap enough for every file: the trailer's length is the file's."""
    if size < _TRAILER.size:
        return False
    with contextlib.suppress(OSError), path.open("rb") as source:
        source.seek(size - _TRAILER.size)
        magic, length, _crc = _TRAILER.unpack(source.read(_TRAILER.size))
        return bool(magic == _MAGIC and length == size - _TRAILER.size)
    return False
