"""One Kafka connection's bytes: size-prefixed request frames in, answer frames out.

Each request frame is received into one buffer of its size (an
``asyncio.BufferedProtocol``): the socket's reads go straight into a large frame's
buffer, not into a stream buffer's chunks that are joined and copied out again. Reads
between frames go into a small ``READ_AHEAD_BYTES`` buffer, so a small request (and the
next one's size prefix) takes one read; what of a frame it holds is copied into the
frame's buffer. Once a size prefix is whole, reading pauses until the listener, having
checked the size against its limits, asks for the frame: the kernel's socket buffer
holds the rest, as Kafka's broker reads one request of a connection at a time.

asyncio asks for the buffer before it reads, so the read that finds a connection's end
takes a read-ahead too: it is let go at once when it holds nothing. Kept until the
listener's task ended the connection, each of a thousand idle clients that left
together held 64 KiB at once (+62 MiB of heap), as many as the loop read ends of in one
iteration, which the machine's load decided.

Python 3.11's socket transport keeps its read callback as a bound method of itself, a
reference cycle CPython breaks at close only from 3.12 (gh-100348): a connection's
transport, its socket and addresses (1.4 KiB) then waited for a full collection of the
cyclic GC, and whether a wave of a thousand dead connections was still held when the
next thousand came depended on when one ran. ``connection_lost`` breaks it, as 3.12 does.

Answers are written at once, each piece handed to the transport as a view: what the
socket does not take at once is copied once, into the transport's buffer (asyncio 3.11
slices what it is given before it copies it). ``drain`` waits only while more than
``WRITE_BUFFER_BYTES`` wait for the socket, so a large Fetch answer goes out from the
transport's buffer while the connection's next request is read (at asyncio's 64 KiB mark
a 1 MiB answer's writer waited for nearly all of it to be sent).
"""

from __future__ import annotations

import asyncio

__all__ = [
    "READ_AHEAD_BYTES",
    "SIZE_PREFIX_BYTES",
    "WRITE_BUFFER_BYTES",
    "FrameCutShort",
    "Frames",
]

SIZE_PREFIX_BYTES = 4

# Read between frames: larger than most requests but a Produce's or a big fetch
# session's, small beside a connection's other memory.
READ_AHEAD_BYTES = 64 * 1024
_NO_BYTES = bytearray()

# Answer bytes a connection may leave in its transport's buffer before its writer
# waits: above one default fetch.max.bytes answer of a partition (1 MiB) and a margin.
WRITE_BUFFER_BYTES = 4 * 1024 * 1024


class FrameCutShort(Exception):
    """The client ended its side within a size prefix or a frame."""

    def __init__(self, received: int):
        super().__init__(received)
        self.received = received


class Frames(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        # Taken when bytes arrive and let go once they are consumed: an idle connection
        # holds none (a thousand idle connections cost the broker a few MiB in all).
        self._ahead = _NO_BYTES
        self._ahead_start = 0  # unconsumed bytes are _ahead[_ahead_start:_ahead_end]
        self._ahead_end = 0
        self._frame: bytearray | None = None  # being read straight from the socket
        self._received = 0  # of _frame
        self._eof = False  # the client ended its side, or the connection is lost
        self._ended: Exception | None = None  # the connection is lost: why
        self._waiter: asyncio.Future[None] | None = None  # the listener's read
        self._writable = asyncio.Event()
        self._writable.set()

    # The listener's side.

    async def size(self) -> int | None:
        """The next frame's size; None if the client ended its side between frames."""
        while self._ahead_end - self._ahead_start < SIZE_PREFIX_BYTES:
            if self._eof:
                if self._ahead_end > self._ahead_start:
                    raise FrameCutShort(self._ahead_end - self._ahead_start)
                return None
            self._resume()
            await self._wait()
        start = self._ahead_start
        return int.from_bytes(self._ahead[start : start + SIZE_PREFIX_BYTES], "big", signed=True)

    async def frame(self, size: int) -> memoryview:
        """The frame whose size ``size`` returned (checked by the caller: 0 or more),
        read-only (as ``kio``'s readers take it)."""
        frame = bytearray(size)
        start = self._ahead_start + SIZE_PREFIX_BYTES
        held = min(size, self._ahead_end - start)
        frame[:held] = self._ahead[start : start + held]
        self._ahead_start = start + held
        self._let_go_of_consumed_ahead()
        if held < size:  # the rest straight from the socket
            self._frame, self._received = frame, held
            self._resume()
            while self._frame is not None:
                if self._eof:
                    raise FrameCutShort(self._received)
                await self._wait()
        return memoryview(frame).toreadonly()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the connection is closed")
        self.transport.write(memoryview(data))

    async def drain(self) -> None:
        await self._writable.wait()
        if self._ended is not None:
            raise ConnectionResetError("the connection was lost") from self._ended

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # The transport's side.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._received :]
        if self._ahead_start == self._ahead_end:
            self._ahead, self._ahead_start, self._ahead_end = bytearray(READ_AHEAD_BYTES), 0, 0
        elif self._ahead_start:  # a piece of a prefix: to the front, so the room is whole
            piece = self._ahead[self._ahead_start : self._ahead_end]
            self._ahead[: len(piece)] = piece
            self._ahead_start, self._ahead_end = 0, len(piece)
        return memoryview(self._ahead)[self._ahead_end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._received += nbytes
            if self._received == len(self._frame):
                self._frame = None
                self._wake()
            return
        self._ahead_end += nbytes
        if self._ahead_end - self._ahead_start >= SIZE_PREFIX_BYTES:
            self._pause()  # until the listener asks for this frame
            self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._let_go_of_consumed_ahead()  # taken for the read that found the end
        self._wake()
        return True  # answers already owed may still be written

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._let_go_of_consumed_ahead()  # or for one a reset ended
        if self.transport is not None:
            _break_read_callback_cycle(self.transport)
        self._ended = exc if exc is not None else ConnectionResetError("closed")
        self._writable.set()
        self._wake()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # Helpers.

    def _let_go_of_consumed_ahead(self) -> None:
        if self._ahead_start == self._ahead_end:
            self._ahead, self._ahead_start, self._ahead_end = _NO_BYTES, 0, 0

    def _pause(self) -> None:
        if self.transport is not None and self.transport.is_reading():
            self.transport.pause_reading()

    def _resume(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing() and not transport.is_reading():
            transport.resume_reading()

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


def _break_read_callback_cycle(transport: asyncio.BaseTransport) -> None:
    """What 3.12's ``close`` does (its reader is removed by then): the transport's own
    read callback let go, so reference counting frees it."""
    state = vars(transport)
    if "_read_ready_cb" in state:
        state["_read_ready_cb"] = None
