"""A Kafka connection's frames over a real loopback TCP connection: each request arrives
whole however the client's bytes are cut, no more than a size prefix is read ahead of the
listener, a client that stops within a prefix or a frame is told apart from one that
stops between frames, and a large answer leaves its writer free before it is sent."""

from __future__ import annotations

import asyncio
import gc
import random
import socket
import struct
import tracemalloc
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tierlog.kafka.frames import READ_AHEAD_BYTES, WRITE_BUFFER_BYTES, FrameCutShort, Frames

MIB = 1024 * 1024


@asynccontextmanager
async def _connected(
    client_receive_buffer_bytes: int | None = None,
) -> AsyncIterator[tuple[Frames, socket.socket]]:
    """The broker's ``Frames`` of one connection, and the client's blocking socket."""
    loop = asyncio.get_running_loop()
    accepted: asyncio.Future[Frames] = loop.create_future()

    class Accepted(Frames):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            accepted.set_result(self)

    server = await loop.create_server(Accepted, "127.0.0.1", 0)
    client = socket.socket()
    if client_receive_buffer_bytes is not None:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, client_receive_buffer_bytes)
    try:
        await loop.run_in_executor(None, client.connect, server.sockets[0].getsockname())
        frames = await accepted
        yield frames, client
    finally:
        client.close()
        server.close()
        await server.wait_closed()


async def _send_in_pieces(client: socket.socket, data: bytes, seed: int) -> None:
    """``data`` in pieces of random sizes, 1 byte to 100 KiB, each sent on its own."""
    pieces, rng, at = [], random.Random(seed), 0
    while at < len(data):
        size = rng.choice((1, 3, 7, rng.randint(1, 100 * 1024)))
        pieces.append(data[at : at + size])
        at += size

    def send() -> None:
        for piece in pieces:
            client.sendall(piece)

    await asyncio.get_running_loop().run_in_executor(None, send)


def _framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def _next(frames: Frames) -> bytes | None:
    size = await frames.size()
    return None if size is None else bytes(await frames.frame(size))


@pytest.mark.parametrize("seed", range(3))
def test_frames_arrive_whole_however_the_bytes_are_cut(seed: int) -> None:
    sizes = [0, 1, 9, READ_AHEAD_BYTES - 4, READ_AHEAD_BYTES + 1, MIB, 3 * MIB + 5, 17]
    rng = random.Random(seed)
    bodies = [rng.randbytes(size) for size in sizes]

    async def run() -> list[bytes | None]:
        async with _connected() as (frames, client):
            sending = asyncio.create_task(
                _send_in_pieces(client, b"".join(map(_framed, bodies)), seed)
            )
            received = [await _next(frames) for _ in bodies]
            await sending
            client.shutdown(socket.SHUT_WR)
            return [*received, await _next(frames)]

    assert asyncio.run(run()) == [*bodies, None]  # None: the client ended between frames


def test_reading_stops_at_a_size_prefix_until_its_frame_is_asked_for() -> None:
    body = random.Random(1).randbytes(4 * MIB)

    async def run() -> None:
        async with _connected() as (frames, client):
            sending = asyncio.create_task(_send_in_pieces(client, _framed(body), 1))
            size = await frames.size()
            assert frames.transport is not None
            assert not frames.transport.is_reading()  # the rest waits in the kernel
            assert size == len(body)
            assert bytes(await frames.frame(size)) == body
            await sending

    asyncio.run(run())


@pytest.mark.parametrize(
    ("sent", "received"),
    [(b"\0\0", 2), (_framed(b"abcdef")[:-2], 4), (_framed(bytes(MIB))[: MIB // 2], MIB // 2 - 4)],
    ids=["within-a-prefix", "within-a-small-frame", "within-a-large-frame"],
)
def test_a_client_that_stops_within_a_frame_is_told_apart(sent: bytes, received: int) -> None:
    async def run() -> int:
        async with _connected() as (frames, client):
            client.sendall(sent)
            client.shutdown(socket.SHUT_WR)
            with pytest.raises(FrameCutShort) as cut:
                size = await frames.size()
                assert size is not None
                await frames.frame(size)
            return cut.value.received

    assert asyncio.run(run()) == received


def test_a_large_answer_leaves_its_writer_free_while_the_client_reads_nothing() -> None:
    answer = bytes(WRITE_BUFFER_BYTES - MIB)

    async def run() -> int:
        async with _connected(client_receive_buffer_bytes=4096) as (frames, _client):
            assert frames.transport is not None
            server_socket = frames.transport.get_extra_info("socket")
            server_socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
            frames.write(answer)
            # asyncio's default mark (64 KiB) made this wait for the client to read.
            await asyncio.wait_for(frames.drain(), timeout=30)
            return frames.transport.get_write_buffer_size()

    assert asyncio.run(run()) > 64 * 1024  # still to send: the socket took a little


@asynccontextmanager
async def _accepted(clients: int) -> AsyncIterator[tuple[list[Frames], list[socket.socket]]]:
    """The broker's ``Frames`` of ``clients`` connections, each connected, and the
    clients' sockets."""
    loop = asyncio.get_running_loop()
    accepted: list[Frames] = []

    def accept() -> Frames:
        accepted.append(Frames())
        return accepted[-1]

    server = await loop.create_server(accept, "127.0.0.1", 0, backlog=clients)
    connected = [socket.socket() for _ in range(clients)]
    try:
        for client in connected:
            await loop.sock_connect(client, server.sockets[0].getsockname())
        while len(accepted) < clients or any(frames.transport is None for frames in accepted):
            await asyncio.sleep(0.01)
        yield accepted, connected
    finally:
        for client in connected:
            client.close()
        server.close()
        await server.wait_closed()


async def _all_ended(accepted: list[Frames], connected: list[socket.socket]) -> None:
    """Every client ends its side at once: each is there for the loop's next read."""
    for client in connected:
        client.close()
    assert await asyncio.gather(*(frames.size() for frames in accepted)) == [None] * len(accepted)


def test_connections_that_end_together_hold_no_read_ahead_each() -> None:
    """asyncio takes a buffer for the read that finds a connection's end: had each kept
    its 64 KiB read-ahead until the listener ended it, a hundred clients that left in one
    loop iteration would hold 6.4 MiB at once."""

    async def run() -> int:
        async with _accepted(100) as (accepted, connected):
            tracemalloc.start()
            try:
                await _all_ended(accepted, connected)
                return tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()

    assert asyncio.run(run()) < 4 * READ_AHEAD_BYTES


def test_a_lost_connection_is_freed_without_the_cyclic_gc() -> None:
    """On Python 3.11 a socket transport's read callback, a bound method of itself, kept
    it and its socket until a full collection (CPython gh-100348)."""

    async def run() -> list[weakref.ref[asyncio.Transport]]:
        async with _accepted(10) as (accepted, connected):
            await _all_ended(accepted, connected)
            transports = []
            for frames in accepted:
                assert frames.transport is not None
                transports.append(weakref.ref(frames.transport))
                frames.close()
            await asyncio.sleep(0)  # each transport's connection_lost, scheduled by close
            accepted.clear()
            return transports

    gc.disable()
    try:
        transports = asyncio.run(run())
        assert [transport() for transport in transports] == [None] * len(transports)
    finally:
        gc.enable()
