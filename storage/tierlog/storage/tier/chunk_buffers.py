"""Chunk-sized buffers that GETs read into, used again once nothing views them.

A chunk a GET brings lives a short while: until its reader has read it and a few reads
more (the recent chunks), then it is dropped. Allocated anew each time, its memory was
fresh pages every time (the C allocator hands blocks this large back to the system and
maps them again): a profile of cold reads put about a third of the reader's CPU there
(docs/BENCHMARKS.md, "Reads at the store's speed"). Here a GET reads its chunks
(``PiecewiseStore.get_into``) into buffers taken from a bounded set; a chunk travels as
a memoryview of its buffer, and a buffer is free again once no view of it is left,
which CPython tells exactly: a bytearray that views export cannot be resized.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

__all__ = ["ChunkBuffers", "Filled", "fill", "nothing_filled"]

# Told the index of each buffer a GET has filled, in order, as soon as it is full: a
# chunk can go to its reader while the rest of its GET's answer is still coming.
Filled = Callable[[int], None]


def nothing_filled(_index: int) -> None:
    """A ``Filled`` for callers that take the buffers once the GET is over."""


class ChunkBuffers:
    """Up to ``max_buffers`` buffers of ``buffer_bytes``, kept and lent out again;
    thread-safe. Beyond them, buffers are new and not kept."""

    def __init__(self, buffer_bytes: int, max_buffers: int):
        self.buffer_bytes = buffer_bytes
        self.max_buffers = max_buffers
        self._buffers: list[bytearray] = []
        self._next = 0  # where the search for a free buffer starts: after the last lent
        self._lock = threading.Lock()

    def take(self, size: int) -> memoryview:
        """A view of ``size`` bytes (at most ``buffer_bytes``) of a buffer nothing else
        views; it is the caller's until every view of it is gone."""
        with self._lock:  # the view is made under the lock: no one else can take it
            count = len(self._buffers)
            for step in range(count):
                index = (self._next + step) % count
                buffer = self._buffers[index]
                if _unviewed(buffer):
                    self._next = index + 1
                    return memoryview(buffer)[:size]
            buffer = bytearray(self.buffer_bytes)
            if count < self.max_buffers:
                self._buffers.append(buffer)
            return memoryview(buffer)[:size]

    @property
    def kept_bytes(self) -> int:
        """Memory the kept buffers hold, lent out or not."""
        with self._lock:
            return len(self._buffers) * self.buffer_bytes


def _unviewed(buffer: bytearray) -> bool:
    """No view of ``buffer`` is alive: shrinking it by a byte is allowed (and undone;
    neither moves it, the allocation keeps its size)."""
    try:
        last = buffer.pop()
    except BufferError:
        return False
    buffer.append(last)
    return True


def fill(
    readinto: Callable[[memoryview], int | None],
    buffers: Sequence[memoryview],
    on_filled: Filled = nothing_filled,
) -> int:
    """Fill ``buffers`` in order from a stream's ``readinto``, each before the next, until
    they are full or the stream ends: the bytes that landed. ``on_filled`` is told each
    buffer filled, as it is."""
    landed = 0
    for index, buffer in enumerate(buffers):
        filled = 0
        while filled < len(buffer) and (got := readinto(buffer[filled:])):
            filled += got
        landed += filled
        if filled < len(buffer):
            break
        on_filled(index)
    return landed
