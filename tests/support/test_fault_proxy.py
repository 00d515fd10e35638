"""The S3 fault proxy's injected answers are well-formed HTTP, so a client's kept-alive
connection stays usable after one, as after S3's own."""

from __future__ import annotations

import socket

from tests.support.fault_proxy import FaultProxy


def _read_until(connection: socket.socket, received: bytes, wanted: bytes) -> bytes:
    while wanted not in received:
        more = connection.recv(4096)
        assert more, f"closed before {wanted!r}: {received!r}"
        received += more
    return received


def test_a_throttled_head_leaves_the_kept_alive_connection_usable() -> None:
    """A HEAD's 503 carries no body (HTTP allows none): the bytes after its headers are
    the next request's answer, never the HEAD's XML, which a client reads as that
    answer's status line or not, depending on when the bytes arrive (raw bytes here)."""
    proxy = FaultProxy("127.0.0.1:9")  # nothing is forwarded: every request is throttled
    host, port = proxy.url.removeprefix("http://").split(":")
    try:
        proxy.slow_down(2)
        with socket.create_connection((host, int(port)), timeout=10) as connection:
            connection.sendall(b"HEAD /bucket/segment HTTP/1.1\r\nHost: s3\r\n\r\n")
            received = _read_until(connection, b"", b"\r\n\r\n")
            assert received.startswith(b"HTTP/1.1 503")
            connection.sendall(b"GET /bucket/segment HTTP/1.1\r\nHost: s3\r\n\r\n")
            received = _read_until(connection, received, b"</Error>")
        after_head = received.split(b"\r\n\r\n", 1)[1]
        assert after_head.startswith(b"HTTP/1.1 503")
    finally:
        proxy.close()
