"""A fault-injecting HTTP proxy on loopback, in front of a real S3 server (MinIO).

It passes every request through unchanged (the ``Host`` header too, so SigV4
signatures still verify) until told to misbehave for the next N requests that match
a method and a path fragment:

- ``slow_down(n)``: answer 503 with S3's ``SlowDown`` XML error, as S3 throttles;
- ``drop(n)``: close the connection without an answer, as a broken network does;
- ``corrupt(n)``: flip one byte of the request body on its way, as a bad NIC does
  (the server's integrity check must refuse it);
- ``lose_answer(n)``: forward the request, then close the connection instead of
  answering, as a timeout after the server acted does (the client cannot tell
  whether its request took effect);
- ``stall(n, seconds)``: hold the request, unanswered and not forwarded, for
  ``seconds`` (or until the proxy closes), then close the connection, as a hung server
  does: the client's read timeout is what ends its wait;
- ``stall_body(n, seconds)``: forward the request, send the answer's headers and the
  first half of its body, then hold the rest for ``seconds`` (or until the proxy
  closes) and close, as a server that hangs mid-answer does.

``injected`` counts the faults served per kind, so a test can tell that what it
asked for actually happened; ``max_in_flight`` is the most requests it ever held at
once (how a test sees that uploads really go in parallel); ``connections`` is how many
connections clients opened to it (how a test sees that they keep them alive).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

__all__ = ["FaultKind", "FaultProxy"]

FaultKind = Literal["slow_down", "drop", "corrupt", "lose_answer", "stall", "stall_body"]

_SLOW_DOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    b"<Resource>/</Resource><RequestId>fault-proxy</RequestId></Error>"
)
# Per connection, not end to end: never forwarded (Expect is answered here).
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection"}


@dataclass
class _Rule:
    kind: FaultKind
    remaining: int
    method: str | None
    path_contains: str | None
    stall_s: float = 0.0

    def matches(self, method: str, path: str) -> bool:
        return (
            self.remaining > 0
            and (self.method is None or self.method == method)
            and (self.path_contains is None or self.path_contains in path)
        )


class FaultProxy:
    """Listens on ``host`` (a free port); forwards to ``upstream`` (``host:port``)."""

    def __init__(self, upstream: str, host: str = "127.0.0.1"):
        self.upstream = upstream
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self._closing = threading.Event()  # ends every stall at once
        self.injected: Counter[FaultKind] = Counter()
        self.forwarded = 0
        self.connections = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._server = _QuietServer((host, 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def slow_down(
        self, n: int, method: str | None = None, path_contains: str | None = None
    ) -> None:
        self._add("slow_down", n, method, path_contains)

    def drop(self, n: int, method: str | None = None, path_contains: str | None = None) -> None:
        self._add("drop", n, method, path_contains)

    def corrupt(self, n: int, method: str | None = None, path_contains: str | None = None) -> None:
        self._add("corrupt", n, method, path_contains)

    def lose_answer(
        self, n: int, method: str | None = None, path_contains: str | None = None
    ) -> None:
        self._add("lose_answer", n, method, path_contains)

    def stall(
        self, n: int, seconds: float, method: str | None = None, path_contains: str | None = None
    ) -> None:
        self._add("stall", n, method, path_contains, seconds)

    def stall_body(
        self, n: int, seconds: float, method: str | None = None, path_contains: str | None = None
    ) -> None:
        self._add("stall_body", n, method, path_contains, seconds)

    def _add(
        self,
        kind: FaultKind,
        n: int,
        method: str | None,
        path_contains: str | None,
        stall_s: float = 0.0,
    ) -> None:
        with self._lock:
            self._rules.append(_Rule(kind, n, method, path_contains, stall_s))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def _fault_for(self, method: str, path: str) -> _Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.matches(method, path):
                    rule.remaining -= 1
                    self.injected[rule.kind] += 1
                    return rule
            self.forwarded += 1
            return None

    def _arrived(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _connected(self) -> None:
        with self._lock:
            self.connections += 1

    def _left(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client hanging up on a kept-alive connection is normal here, not news."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


def _handler_for(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect
        upstream_connection: http.client.HTTPConnection | None = None

        def setup(self) -> None:
            proxy._connected()
            super().setup()

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the tests' output is the tests'."""

        def _read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length", 0)))

        def _handle(self) -> None:
            proxy._arrived()
            try:
                self._serve()
            finally:
                proxy._left()

        def _serve(self) -> None:
            body = self._read_body()
            rule = proxy._fault_for(self.command, self.path)
            fault = rule.kind if rule else None
            if rule is not None and fault == "stall":
                proxy._closing.wait(rule.stall_s)  # no answer: the client times out
            if fault in ("drop", "stall"):
                self.close_connection = True
                with contextlib.suppress(OSError):  # a timed-out client may be gone already
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault == "slow_down":
                self.send_response(503, "Slow Down")
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(_SLOW_DOWN_BODY)))
                self.end_headers()
                if self.command != "HEAD":  # a HEAD's answer has no body: its bytes would
                    self.wfile.write(_SLOW_DOWN_BODY)  # be the next answer's status line
                return
            if fault == "corrupt" and body:
                body = body[:-1] + bytes([body[-1] ^ 0xFF])
            try:
                status, reason, headers, answer = self._forward(body)
            except OSError:  # the upstream is down: the client sees a dead endpoint
                self.close_connection = True
                return
            if fault == "lose_answer":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.send_response(status, reason)
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            if rule is not None and fault == "stall_body":
                self.wfile.write(answer[: len(answer) // 2])
                proxy._closing.wait(rule.stall_s)  # the client's read timeout ends its wait
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(answer)

        def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
            if self.upstream_connection is None:
                self.upstream_connection = http.client.HTTPConnection(proxy.upstream, timeout=60)
            connection = self.upstream_connection
            try:
                connection.putrequest(
                    self.command, self.path, skip_host=True, skip_accept_encoding=True
                )
                for name, value in self.headers.items():
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        connection.putheader(name, value)
                if body or self.command in ("PUT", "POST"):
                    connection.putheader("Content-Length", str(len(body)))
                connection.endheaders(body)
                response = connection.getresponse()
                answer = response.read()
            except (OSError, http.client.HTTPException):
                connection.close()
                self.upstream_connection = None
                raise OSError("upstream failed") from None
            headers = [
                (name, value)
                for name, value in response.getheaders()
                if name.lower() not in _HOP_BY_HOP
            ]
            if response.getheader("Content-Length") is None:
                headers.append(("Content-Length", str(len(answer))))
            return response.status, response.reason, headers, answer

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle  # noqa: N815

    return Handler
