"""Reading what a put uploads: its size, and any range of its bytes, across its parts.

Stores read a body a part (an S3 multipart part, a copy chunk) at a time, so a body
of files is never held in memory whole; a file that shrinks while it is read fails
the put rather than uploading a short object, and so does a ``PinnedFile`` whose path
names another file by the time the put opens it.
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path
from types import TracebackType

from tierlog.storage.tier.store import Body, Concatenation, ObjectStoreError, PinnedFile

__all__ = ["BodyReader"]


class BodyReader:
    """Random access to a body's bytes; close it (or use ``with``) to release its files."""

    def __init__(self, body: Body):
        parts = body.parts if isinstance(body, Concatenation) else (body,)
        self._parts: list[bytes | int] = []  # bytes, or an open file descriptor
        self._starts: list[int] = []
        position = 0
        try:
            for part in parts:
                if isinstance(part, Path | PinnedFile):
                    fd = os.open(part if isinstance(part, Path) else part.path, os.O_RDONLY)
                    self._parts.append(fd)
                    length = _checked_length(fd, part)
                else:
                    self._parts.append(part)
                    length = len(part)
                self._starts.append(position)
                position += length
        except OSError as error:
            self.close()
            raise ObjectStoreError(f"cannot read the body: {error}") from error
        self.size = position
        self._ends = [*self._starts[1:], position]

    def read(self, start: int, length: int) -> bytes:
        """Bytes ``[start, start + length)``, cut at the body's end."""
        stop = min(start + length, self.size)
        pieces: list[bytes] = []
        index = max(bisect.bisect_right(self._starts, start) - 1, 0)
        position = start
        while position < stop:
            part, part_start, part_end = self._parts[index], self._starts[index], self._ends[index]
            wanted = min(stop, part_end) - position
            if wanted > 0:
                offset = position - part_start
                if isinstance(part, int):
                    data = os.pread(part, wanted, offset)
                    if len(data) != wanted:
                        raise ObjectStoreError("a file being uploaded shrank while it was read")
                else:
                    data = bytes(part[offset : offset + wanted])
                pieces.append(data)
                position += wanted
            index += 1
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def close(self) -> None:
        for part in self._parts:
            if isinstance(part, int):
                os.close(part)
        self._parts = []

    def __enter__(self) -> BodyReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _checked_length(fd: int, part: Path | PinnedFile) -> int:
    stat = os.fstat(fd)
    if isinstance(part, PinnedFile) and (stat.st_dev, stat.st_ino, stat.st_size) != (
        part.device,
        part.inode,
        part.size,
    ):
        raise ObjectStoreError(f"{part.path} was replaced or changed since it was measured")
    return stat.st_size
