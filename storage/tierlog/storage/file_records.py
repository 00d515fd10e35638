"""A ``.log`` file as a sequence of record batches (Kafka's FileRecords).

Writes only ever go to the end, in one ``writev`` per append, so the page cache sees
sequential I/O and a reader never needs a lock: it reads below ``size``, which moves
only after the bytes are in the file. A failed or partial write (a full disk) is cut
back to the last whole append before the error is raised, so the file never holds a
torn batch that a later append would bury.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from tierlog.storage.errors import CorruptRecordError, KafkaStorageError
from tierlog.storage.records import HEADER_READ_SIZE, LOG_OVERHEAD, BatchHeader, parse_header

__all__ = ["FileBatch", "FileRecords", "scan_batches", "storage_error"]

IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
SCAN_CHUNK_BYTES = 8 * 1024 * 1024

Buffer = bytes | bytearray | memoryview


class FileBatch(NamedTuple):
    """A batch found in the file: its file ``position``, and its ``header`` as parsed
    from ``buffer`` (so ``header.position`` indexes ``buffer``, ready for CRC checks
    and decoding without another copy). ``buffer`` may hold only the header."""

    position: int
    header: BatchHeader
    buffer: memoryview

    @property
    def data(self) -> memoryview:
        """The batch's own bytes (only when ``buffer`` holds the whole batch)."""
        start = self.header.position
        return self.buffer[start : start + self.header.size]

    @property
    def end(self) -> int:
        return self.position + self.header.size


class FileRecords:
    """Append-only batches in one file, read by position with ``pread``."""

    def __init__(self, path: Path, *, read_only: bool = False):
        """Open (creating if need be) a log file; ``read_only`` opens an existing one as is."""
        self.path = path
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
        self._fd = os.open(path, flags, 0o644)
        self.size = os.fstat(self._fd).st_size

    # -- writing ----------------------------------------------------------------------

    def append(self, pieces: Sequence[Buffer], total: int) -> None:
        """Write ``pieces`` (``total`` bytes in all) at the end as one unit."""
        start = self.size
        try:
            _write_all(self._fd, start, pieces, total)
        except OSError as error:
            self._cut_back(start)
            raise storage_error(error, self.path) from error
        self.size = start + total

    def _cut_back(self, size: int) -> None:
        # If even this fails the file keeps a torn tail, which recovery cuts off.
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, size)

    def truncate_to(self, size: int) -> int:
        """Cut the file to ``size`` bytes; returns how many were removed."""
        if size > self.size or size < 0:
            raise CorruptRecordError(f"cannot truncate {self.path} to {size} of {self.size}")
        removed = self.size - size
        os.ftruncate(self._fd, size)
        self.size = size
        return removed

    def flush(self) -> None:
        try:
            os.fdatasync(self._fd)
        except OSError as error:
            raise storage_error(error, self.path) from error

    def close(self) -> None:
        os.close(self._fd)

    def rename_to(self, path: Path) -> None:
        self.path.replace(path)
        self.path = path

    # -- reading ----------------------------------------------------------------------

    def read(self, position: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``position`` (never past ``size``)."""
        length = max(0, min(length, self.size - position))
        return os.pread(self._fd, length, position) if length else b""

    def header_at(self, position: int, end: int | None = None) -> FileBatch | None:
        """The batch header at ``position``; None at the end or before a torn tail."""
        end = self.size if end is None else end
        if end - position < LOG_OVERHEAD:
            return None
        raw = memoryview(os.pread(self._fd, min(HEADER_READ_SIZE, end - position), position))
        header = parse_header(raw, 0)
        if position + header.size > end:
            return None
        return FileBatch(position, header, raw)

    def headers(self, start: int = 0, end: int | None = None) -> Iterator[FileBatch]:
        """Shallow walk over batch headers from ``start`` (a batch boundary)."""
        position = start
        while (batch := self.header_at(position, end)) is not None:
            yield batch
            position = batch.end

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[FileBatch]:
        """Each batch's header with its bytes, read in large sequential chunks.

        Raises CorruptRecordError at bytes that cannot start a batch; a batch cut off
        by the end of the file simply ends the walk (the caller knows ``size``).
        """
        end = self.size if end is None else end
        return scan_batches(
            lambda position, length: os.pread(self._fd, length, position), start, end
        )


def scan_batches(
    read: Callable[[int, int], bytes],
    start: int,
    end: int,
    chunk_bytes: int = SCAN_CHUNK_BYTES,
) -> Iterator[FileBatch]:
    """The batches of bytes ``[start, end)`` that ``read(position, length)`` returns (a
    file's, a remote object's), read in chunks of ``chunk_bytes``; see ``batches``."""
    position = start
    while end - position >= LOG_OVERHEAD:
        chunk = memoryview(read(position, min(chunk_bytes, end - position)))
        offset = 0
        last_chunk = position + len(chunk) == end
        while len(chunk) - offset >= LOG_OVERHEAD:
            if len(chunk) - offset < HEADER_READ_SIZE and not last_chunk:
                break  # a header cut by the chunk's end: the next chunk starts with it
            header = parse_header(chunk, offset)
            if offset + header.size > len(chunk):
                break
            yield FileBatch(position + offset, header, chunk)
            offset += header.size
        if offset == 0:  # one batch larger than the chunk: read it whole
            header = parse_header(chunk, 0)
            if position + header.size > end:
                return
            whole = memoryview(read(position, header.size))
            yield FileBatch(position, parse_header(whole, 0), whole)
            offset = header.size
        position += offset


def _write_all(fd: int, position: int, pieces: Sequence[Buffer], total: int) -> None:
    if len(pieces) <= IOV_MAX and os.pwritev(fd, pieces, position) == total:
        return  # the usual case: one system call wrote everything
    views = [memoryview(piece).cast("B") for piece in pieces]
    written_total = 0
    while views:
        written = os.pwritev(fd, views[:IOV_MAX], position + written_total)
        if written == 0:
            raise OSError(errno.EIO, "write made no progress")
        written_total += written
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]
    assert written_total == total


def storage_error(error: OSError, path: Path) -> KafkaStorageError:
    """The typed error for a failed write of ``path``: a full disk says so plainly."""
    if error.errno == errno.ENOSPC:
        return KafkaStorageError(f"no space left on the device holding {path}")
    return KafkaStorageError(f"I/O error on {path}: {error.strerror or error}")
