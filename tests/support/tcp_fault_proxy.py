"""A TCP proxy on loopback that can cut, blackhole, delay or lose the answers of each link.

The network faults of the fault run (issue 18): brokers talk to each other, and clients to
brokers, through one listen port per upstream, so a test can cut one broker off while
the rest go on. The proxy runs in its own process (``python -m
tests.support.tcp_fault_proxy``), so it keeps forwarding while the test blocks in a call,
and ``TcpFaultProxy`` in the test's process starts it and steers it over a control
channel: a Unix socket in the abstract namespace (nothing on disk to clean up after a
``kill -9``), one JSON request and one JSON answer per connection.

Bytes pass unchanged in both directions (gRPC's HTTP/2 included). Per route:

- ``cut``: every open connection is reset (RST, as ``iptables -j REJECT --reject-with
  tcp-reset`` does) and new ones are reset as soon as they are accepted: a client
  fails fast;
- ``blackhole``: connections are accepted and read, and nothing is forwarded, as when
  packets vanish: a client waits for its deadline, the nasty case for timeouts. What was
  read is held, and a new connection dials its upstream only once bytes may pass: on
  ``heal`` it all flows, in order, as TCP's retransmissions deliver it when a partition
  heals before the connection gives up (a stale request arriving late included);
- ``lose_answers``: requests reach the upstream, its answers are dropped, as when a
  server acted and its reply was lost: the client cannot tell whether it took effect;
- ``delay(ms)``: each chunk is forwarded ``ms`` after it arrived, both ways;
- ``heal``: no fault: pass at once.

Each command is in effect when its answer comes back (a cut's connections are reset by
then).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, cast, get_args

__all__ = ["Command", "FaultProxyError", "RouteStatus", "TcpFaultProxy"]

Command = Literal["cut", "blackhole", "lose_answers", "delay", "heal"]
Mode = Literal["pass", "cut", "blackhole", "lose_answers"]
CHUNK_BYTES = 64 * 1024
REPO = Path(__file__).resolve().parents[2]


class FaultProxyError(RuntimeError):
    """The proxy refused a command (an unknown route or command, a negative delay) or
    could not start."""


@dataclass(frozen=True)
class RouteStatus:
    mode: Mode
    delay_ms: int
    links: int  # connections open now
    answers_lost_bytes: int  # dropped by lose_answers since the proxy started
    # Connections accepted since the proxy started (how a test sees that clients keep
    # theirs alive); a count, not the route's state: equal statuses may differ in it.
    accepted: int = field(default=0, compare=False)


# -- the proxy process ----------------------------------------------------------------------


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST rather than a FIN: the peer learns at once, as from a REJECT."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Route:
    """One listen port in front of one upstream, and the fault it is under."""

    def __init__(self, name: str, listen_port: int, upstream: str):
        self.name = name
        self.listen_port = listen_port
        self.upstream_host, _, port = upstream.rpartition(":")
        self.upstream_port = int(port)
        self.mode: Mode = "pass"
        self.delay_ms = 0
        self.flowing = asyncio.Event()  # set unless blackholed (or cut)
        self.flowing.set()
        # Set (and replaced) at each command: a chunk waiting out a delay looks again.
        self.changed = asyncio.Event()
        self.links: set[_Link] = set()
        self.answers_lost_bytes = 0
        self.accepted = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode == "cut":
            _reset(writer)
            return
        link = _Link(self, reader, writer)
        self.links.add(link)
        try:
            await link.run()
        except asyncio.CancelledError:
            if not link.was_reset:
                raise
            # Ended by a cut: not re-raised, since asyncio 3.11's stream callback logs a
            # cancelled handler as an error.
        finally:
            self.links.discard(link)

    def apply(self, command: Command, delay_ms: int) -> None:
        self.changed.set()
        self.changed = asyncio.Event()
        if command == "cut":
            self.mode = "cut"
            self.flowing.clear()
            for link in list(self.links):
                link.reset()
        elif command == "blackhole":
            self.mode = "blackhole"
            self.flowing.clear()
        elif command == "lose_answers":
            self.mode = "lose_answers"
        elif command == "delay":
            self.delay_ms = delay_ms
        else:  # heal
            self.mode, self.delay_ms = "pass", 0
            self.flowing.set()

    def status(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "delay_ms": self.delay_ms,
            "links": len(self.links),
            "answers_lost_bytes": self.answers_lost_bytes,
            "accepted": self.accepted,
        }


class _Link:
    """One client connection and its upstream connection, bytes pumped both ways."""

    def __init__(
        self, route: _Route, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ):
        self.route = route
        self.client_reader = client_reader
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None
        self.was_reset = False

    def reset(self) -> None:
        """End the link from outside (a cut, the proxy stopping): both sides get an RST.
        It leaves the route's links at once, so a status asked next no longer counts it."""
        self.was_reset = True
        self.route.links.discard(self)
        self._abort()
        if self.task is not None:
            self.task.cancel()

    def _abort(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                _reset(writer)

    async def run(self) -> None:
        self.task = asyncio.current_task()
        to_upstream: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        to_client: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        pumps = [asyncio.create_task(self._read(self.client_reader, to_upstream))]
        try:
            await self.route.flowing.wait()  # in a blackhole, even the SYN would vanish
            upstream_reader, self.upstream = await asyncio.open_connection(
                self.route.upstream_host, self.route.upstream_port
            )
            pumps += [
                asyncio.create_task(self._read(upstream_reader, to_client)),
                asyncio.create_task(self._write(to_upstream, self.upstream, answers=False)),
                asyncio.create_task(self._write(to_client, self.client, answers=True)),
            ]
            await asyncio.gather(*pumps)
        except OSError:  # either side went away (or the upstream is down): end both
            self._abort()
        finally:
            for pump in pumps:
                pump.cancel()
            for writer in (self.client, self.upstream):
                if writer is not None:
                    writer.close()

    async def _read(
        self, reader: asyncio.StreamReader, queue: asyncio.Queue[tuple[float, bytes] | None]
    ) -> None:
        loop = asyncio.get_running_loop()
        while data := await reader.read(CHUNK_BYTES):
            queue.put_nowait((loop.time(), data))
        queue.put_nowait(None)

    async def _write(
        self,
        queue: asyncio.Queue[tuple[float, bytes] | None],
        writer: asyncio.StreamWriter,
        *,
        answers: bool,
    ) -> None:
        """Forward what ``queue`` holds to ``writer`` under the route's fault; ``answers``:
        this is the upstream's side, which ``lose_answers`` drops."""
        loop = asyncio.get_running_loop()
        while (item := await queue.get()) is not None:
            arrived, data = item
            while True:  # until due under the fault in force (a command changes it)
                await self.route.flowing.wait()
                wait_s = arrived + self.route.delay_ms / 1000 - loop.time()
                if wait_s <= 0:
                    break
                with contextlib.suppress(TimeoutError):  # the delay fault itself
                    await asyncio.wait_for(self.route.changed.wait(), wait_s)
            if answers and self.route.mode == "lose_answers":
                self.route.answers_lost_bytes += len(data)
                continue
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


async def _control(
    routes: Mapping[str, _Route], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        answer = _answer(routes, json.loads(await reader.readline()))
    except (ValueError, KeyError, TypeError) as error:
        answer = {"error": f"{type(error).__name__}: {error}"}
    writer.write(json.dumps(answer).encode() + b"\n")
    await writer.drain()
    writer.close()


def _answer(routes: Mapping[str, _Route], request: dict[str, Any]) -> dict[str, Any]:
    command = request["command"]
    if command == "status":
        return {"routes": {name: route.status() for name, route in routes.items()}}
    if command not in get_args(Command):
        raise ValueError(f"unknown command {command!r}")
    route = routes.get(request["route"])
    if route is None:
        raise KeyError(f"no route {request['route']!r}; there are {sorted(routes)}")
    delay_ms = request.get("delay_ms", 0)
    if not isinstance(delay_ms, int) or delay_ms < 0:
        raise ValueError(f"delay_ms must be a whole number of ms >= 0, not {delay_ms!r}")
    route.apply(command, delay_ms)
    return {"ok": route.status()}


async def serve(routes: list[_Route], control: str) -> None:
    """Listen on every route and on ``control`` until SIGTERM or SIGINT."""
    by_name = {route.name: route for route in routes}
    listening = {route.name: await route.start() for route in routes}
    control_server = await asyncio.start_unix_server(
        lambda reader, writer: _control(by_name, reader, writer), path=control
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(json.dumps({"listening": listening}), flush=True)  # the parent waits for this
    await stop.wait()
    control_server.close()
    links = [link for route in routes for link in route.links]
    for route in routes:
        assert route.server is not None
        route.server.close()
    for link in links:
        link.reset()
    await asyncio.gather(*(link.task for link in links if link.task), return_exceptions=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--control", required=True, help="abstract Unix socket name")
    parser.add_argument(
        "--route",
        action="append",
        default=[],
        metavar="NAME=LISTEN_PORT=UPSTREAM_HOST:PORT",
        help="a listen port (0: any free one) in front of an upstream; repeatable",
    )
    args = parser.parse_args(argv)
    routes = []
    for spec in args.route:
        name, listen_port, upstream = spec.split("=")
        routes.append(_Route(name, int(listen_port), upstream))
    asyncio.run(serve(routes, "\0" + args.control))


# -- the test's side ---------------------------------------------------------------------------


class TcpFaultProxy:
    """The proxy process, started by ``start``, and its control channel."""

    def __init__(self, process: subprocess.Popen[bytes], control: str, addresses: dict[str, str]):
        self.process = process
        self.control = control
        self.addresses = addresses  # route name -> "127.0.0.1:PORT" to dial instead

    @classmethod
    def start(
        cls,
        upstreams: Mapping[str, str],
        listen_ports: Mapping[str, int] | None = None,
        timeout_s: float = 30,
    ) -> TcpFaultProxy:
        """A proxy with one route per ``upstreams`` entry (name -> ``host:port``), each
        listening on its ``listen_ports`` entry or on a free port."""
        ports = listen_ports or {}
        control = f"tierlog-fault-proxy-{uuid.uuid4().hex}"
        command = [sys.executable, "-m", "tests.support.tcp_fault_proxy", "--control", control]
        for name, upstream in upstreams.items():
            command += ["--route", f"{name}={ports.get(name, 0)}={upstream}"]
        process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE)
        try:
            ready = _read_line(process, timeout_s)
            addresses: dict[str, str] = json.loads(ready)["listening"]
        except BaseException:
            process.kill()
            process.wait()
            raise
        return cls(process, control, addresses)

    def address(self, route: str) -> str:
        return self.addresses[route]

    def cut(self, route: str) -> None:
        self._send({"command": "cut", "route": route})

    def blackhole(self, route: str) -> None:
        self._send({"command": "blackhole", "route": route})

    def lose_answers(self, route: str) -> None:
        self._send({"command": "lose_answers", "route": route})

    def delay(self, route: str, delay_ms: int) -> None:
        self._send({"command": "delay", "route": route, "delay_ms": delay_ms})

    def heal(self, route: str) -> None:
        self._send({"command": "heal", "route": route})

    def status(self) -> dict[str, RouteStatus]:
        routes = self._send({"command": "status"})["routes"]
        return {name: RouteStatus(**fields) for name, fields in routes.items()}

    def _send(self, request: dict[str, Any]) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            sock.connect("\0" + self.control)
            sock.sendall(json.dumps(request).encode() + b"\n")
            answer = cast(dict[str, Any], json.loads(sock.makefile("rb").readline()))
        if "error" in answer:
            raise FaultProxyError(answer["error"])
        return answer

    def close(self, timeout_s: float = 30) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _read_line(process: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    """The first line the process prints, within ``timeout_s``."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        readable, _, _ = select.select([fd], [], [], max(remaining, 0))
        if not readable:
            raise FaultProxyError(f"the fault proxy did not start within {timeout_s} s")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise FaultProxyError(f"the fault proxy exited: {process.wait()}")
        line += chunk
    return line


if __name__ == "__main__":
    main()
