"""Read-only views of a segment's files, for tools that must never change what they inspect.

A dump tool may look at a crashed broker's files (a preallocated index with a
zero-filled tail is evidence) or at files it cannot write, so every file here is
opened read-only: indexes through the storage classes' ``read_only`` mode, a ``.log``
mapped with ``ACCESS_READ``. The sanity rules are the storage engine's own pure
functions, so a file that fails here is a file the broker would rebuild at start-up.
"""

from __future__ import annotations

import mmap
import operator
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from tierlog.storage import index as storage_index
from tierlog.storage.errors import TierlogError
from tierlog.storage.index import IndexEntry, OffsetIndex, SegmentIndex, TimeIndex
from tierlog.storage.records import LOG_OVERHEAD, BatchHeader, parse_header

__all__ = [
    "IndexEntry",
    "IndexFile",
    "base_offset_of",
    "batch_at",
    "offset_index_problem",
    "open_log",
    "read_offset_index",
    "read_time_index",
    "sibling",
    "time_index_problem",
]


class IndexFile(NamedTuple):
    """Every slot of an index file, decoded, plus what the file length says."""

    path: Path
    base_offset: int
    entry_size: int
    length_bytes: int
    entries: Sequence[IndexEntry]

    @property
    def live_entries(self) -> Sequence[IndexEntry]:
        """The entries before a zero-filled preallocated tail, as Kafka's dump reads them.

        A crash can leave an active segment's index at its preallocated length; the
        first slot after slot 0 whose offset is the base offset marks where the written
        entries end.
        """
        offset_of = _offset_of(self)
        for slot in range(1, len(self.entries)):
            if offset_of(self.entries[slot]) == self.base_offset:
                return self.entries[:slot]
        return self.entries


def _offset_of(index: IndexFile) -> operator.itemgetter[int]:
    return operator.itemgetter(0 if index.entry_size == OffsetIndex.entry_size else 1)


def base_offset_of(path: Path) -> int:
    """The base offset a segment file's name carries (``00000000000000000042.log`` -> 42)."""
    stem = path.name.split(".", 1)[0]
    if not stem.isdigit():
        raise ValueError(f"{path.name} is not named by a base offset")
    return int(stem)


def sibling(path: Path, suffix: str) -> Path:
    """The file of the same segment with another suffix (``.log``, ``.index``...)."""
    return path.with_name(path.name.split(".", 1)[0] + suffix)


def _read_index(index_type: type[SegmentIndex], path: Path) -> IndexFile:
    base = base_offset_of(path)
    index = index_type(path, base, 0, writable=False, read_only=True)
    try:
        keys, values = index.columns()
        entries = [IndexEntry(key, value) for key, value in zip(keys, values, strict=True)]
        return IndexFile(path, base, index.entry_size, index.length_bytes, entries)
    finally:
        index.close()


def read_offset_index(path: Path) -> IndexFile:
    return _read_index(OffsetIndex, path)


def read_time_index(path: Path) -> IndexFile:
    return _read_index(TimeIndex, path)


@contextmanager
def open_log(path: Path) -> Iterator[bytes | mmap.mmap]:
    """The bytes of a ``.log`` file, memory-mapped read-only (empty files as ``b""``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if os.fstat(fd).st_size == 0:
            yield b""
            return
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        try:
            yield mapped
        finally:
            mapped.close()
    finally:
        os.close(fd)


def batch_at(log: bytes | mmap.mmap, position: int) -> BatchHeader | None:
    """The header of the whole batch at ``position``; None if nothing whole is there."""
    if position < 0 or len(log) - position < LOG_OVERHEAD:
        return None
    try:
        header = parse_header(log, position)
    except TierlogError:  # garbage, an unknown magic or an unknown codec id
        return None
    return header if header.end_position <= len(log) else None


# -- sanity checks (tierlog's start-up checks) -------------------------------------------


def offset_index_problem(index: IndexFile, log_size_bytes: int, next_offset: int) -> str | None:
    """Why a tierlog broker would rebuild this ``.index``, or None when it is sane."""
    return storage_index.offset_index_problem(
        index.base_offset,
        index.length_bytes,
        [entry.key for entry in index.entries],
        [entry.value for entry in index.entries],
        log_size_bytes=log_size_bytes,
        log_end_offset=next_offset,
    )


def time_index_problem(index: IndexFile, log_size_bytes: int) -> str | None:
    """Why a tierlog broker would rebuild this ``.timeindex``, or None when it is sane."""
    return storage_index.time_index_problem(
        index.base_offset,
        index.length_bytes,
        [entry.key for entry in index.entries],
        [entry.value for entry in index.entries],
        log_size_bytes=log_size_bytes,
    )
