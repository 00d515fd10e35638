"""A byte range held as the consecutive buffers it arrived in, read without joining them.

A range of a remote object comes as chunks: views of the bytes a ranged GET brought,
or of cache files. Joining them for every read was a copy (and on a large range a
fresh allocation, page faults included) before the copy into the answer; here a
reader looks at headers where they lie and joins only the bytes it returns, once.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

__all__ = ["Pieces"]


class Pieces:
    """Bytes ``[start, end)`` of something, as consecutive buffers (views, not copies)."""

    def __init__(self, start: int, buffers: Sequence[bytes | memoryview]):
        self.start = start
        self._views = [memoryview(buffer) for buffer in buffers if len(buffer)]
        self._starts: list[int] = []
        position = start
        for view in self._views:
            self._starts.append(position)
            position += len(view)
        self.end = position

    def holds(self, start: int, end: int) -> bool:
        return self.start <= start and end <= self.end

    def views(self, start: int, end: int) -> list[memoryview]:
        """Views of ``[start, end)`` (clipped to what is held), in order."""
        start, end = max(start, self.start), min(end, self.end)
        if start >= end:
            return []
        index = bisect.bisect_right(self._starts, start) - 1
        out: list[memoryview] = []
        while start < end:
            view, view_start = self._views[index], self._starts[index]
            stop = min(end, view_start + len(view))
            out.append(view[start - view_start : stop - view_start])
            start, index = stop, index + 1
        return out

    def contiguous(self, start: int, end: int) -> bytes | memoryview:
        """``[start, end)`` as one buffer: a view when one piece holds it, else a copy
        (a batch header across a chunk boundary: a few dozen bytes)."""
        views = self.views(start, end)
        if len(views) == 1:
            return views[0]
        return b"".join(views)

    def join(self, start: int, end: int) -> bytes:
        """``[start, end)`` as bytes of its own: the one copy a reader makes."""
        return b"".join(self.views(start, end))
