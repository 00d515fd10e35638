"""Read-only views of a segment's files, for tools that must never change what they inspect.

The storage classes (``FileRecords``, ``OffsetIndex``, ``TimeIndex``) open their files
read-write and trim an index when they close it; that is right for a broker and wrong
for a dump tool, which may look at a crashed broker's files (a preallocated index with
a zero-filled tail is evidence) or at files it has no write permission on.  So this
module opens every file ``O_RDONLY``, maps a ``.log`` with ``ACCESS_READ`` and decodes
index entries itself.  The on-disk layouts are the ones ``tierlog.storage.index``
documents: ``.index`` entries are (offset - base: int32, position: int32), ``.timeindex``
entries are (timestamp: int64, offset - base: int32), both big-endian.

The sanity checks are the ones a tierlog broker runs at start-up to decide whether an
index must be rebuilt from its log (``LogSegment.sanity_check``), so a file that fails
here is a file the broker would rebuild.
"""

from __future__ import annotations

import mmap
import operator
import os
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from tierlog.storage.errors import TierlogError
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

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class IndexEntry(NamedTuple):
    key: int  # absolute offset (.index) or timestamp (.timeindex)
    value: int  # file position (.index) or absolute offset (.timeindex)


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
    return operator.itemgetter(0 if index.entry_size == OFFSET_ENTRY.size else 1)


def base_offset_of(path: Path) -> int:
    """The base offset a segment file's name carries (``00000000000000000042.log`` -> 42)."""
    stem = path.name.split(".", 1)[0]
    if not stem.isdigit():
        raise ValueError(f"{path.name} is not named by a base offset")
    return int(stem)


def sibling(path: Path, suffix: str) -> Path:
    """The file of the same segment with another suffix (``.log``, ``.index``...)."""
    return path.with_name(path.name.split(".", 1)[0] + suffix)


def _read_bytes(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        chunks = []
        while size > 0 and (chunk := os.read(fd, size)):
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_offset_index(path: Path) -> IndexFile:
    raw = _read_bytes(path)
    base = base_offset_of(path)
    whole = len(raw) - len(raw) % OFFSET_ENTRY.size
    entries = [
        IndexEntry(base + relative, position)
        for relative, position in OFFSET_ENTRY.iter_unpack(raw[:whole])
    ]
    return IndexFile(path, base, OFFSET_ENTRY.size, len(raw), entries)


def read_time_index(path: Path) -> IndexFile:
    raw = _read_bytes(path)
    base = base_offset_of(path)
    whole = len(raw) - len(raw) % TIME_ENTRY.size
    entries = [
        IndexEntry(timestamp, base + relative)
        for timestamp, relative in TIME_ENTRY.iter_unpack(raw[:whole])
    ]
    return IndexFile(path, base, TIME_ENTRY.size, len(raw), entries)


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
    if index.length_bytes % index.entry_size:
        return f"length {index.length_bytes} is not a multiple of {index.entry_size}"
    entries = index.entries
    if not entries:
        return None
    offsets = [entry.key for entry in entries]
    positions = [entry.value for entry in entries]
    if offsets[0] < index.base_offset or positions[0] < 0:
        return f"first entry {tuple(entries[0])} lies before the segment"
    if not _strictly_increasing(offsets):
        return "offsets are not strictly increasing"
    if not _strictly_increasing(positions):
        return "positions are not strictly increasing"
    if positions[-1] >= log_size_bytes:
        return f"last position {positions[-1]} is not below the log size {log_size_bytes}"
    if offsets[-1] >= next_offset:
        return f"last offset {offsets[-1]} is not below the log end offset {next_offset}"
    return None


def time_index_problem(index: IndexFile, log_size_bytes: int) -> str | None:
    """Why a tierlog broker would rebuild this ``.timeindex``, or None when it is sane."""
    if index.length_bytes % index.entry_size:
        return f"length {index.length_bytes} is not a multiple of {index.entry_size}"
    entries = index.entries
    if not entries:
        return None
    if log_size_bytes <= 0:
        return "the index has entries but the log is empty"
    timestamps = [entry.key for entry in entries]
    offsets = [entry.value for entry in entries]
    if offsets[0] < index.base_offset:
        return f"first entry {tuple(entries[0])} lies before the segment"
    if not _strictly_increasing(timestamps):
        return "timestamps are not strictly increasing"
    if not all(map(operator.le, offsets, offsets[1:])):
        return "offsets decrease"
    return None


def _strictly_increasing(values: Sequence[int]) -> bool:
    return all(map(operator.lt, values, values[1:]))
