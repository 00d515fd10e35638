"""The TCP fault proxy in its own process, in front of a real gRPC server (grpc's health
service) and a plain echo server: bytes pass unchanged, a cut fails calls fast with
UNAVAILABLE, a blackhole makes them reach their deadline, a delay slows them, and heal
restores each."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.support.tcp_fault_proxy import FaultProxyError, RouteStatus, TcpFaultProxy

SERVING = health_pb2.HealthCheckResponse.SERVING
# Short reconnect backoffs: after a heal the channel dials again within a fraction of a
# second, rather than after the up-to-two-minute backoff gRPC grows by default.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]
LONG_NAME = "s" * 200_000  # a service name spanning many HTTP/2 frames and TCP chunks


@pytest.fixture(scope="module")
def grpc_upstream() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = health.HealthServicer()
    servicer.set(LONG_NAME, SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture(scope="module")
def echo_upstream() -> Iterator[str]:
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo) as server:
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever)
        thread.start()
        try:
            host, port = server.server_address[:2]
            yield f"{host!s}:{port}"
        finally:
            server.shutdown()
            thread.join()


@pytest.fixture
def proxy(grpc_upstream: str, echo_upstream: str) -> Iterator[TcpFaultProxy]:
    with TcpFaultProxy.start({"grpc": grpc_upstream, "echo": echo_upstream}) as started:
        yield started


@pytest.fixture
def channel(proxy: TcpFaultProxy) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(proxy.address("grpc"), options=CHANNEL_OPTIONS) as opened:
        yield opened


def check(channel: grpc.Channel, timeout_s: float, wait_for_ready: bool = False) -> int:
    stub: Any = health_pb2_grpc.HealthStub(channel)  # typeshed: no methods
    request = health_pb2.HealthCheckRequest(service=LONG_NAME)
    status: int = stub.Check(request, timeout=timeout_s, wait_for_ready=wait_for_ready).status
    return status


def failed_call(channel: grpc.Channel, timeout_s: float) -> tuple[grpc.StatusCode, float]:
    """The status code of a call that must fail, and how long it took."""
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as failed:
        check(channel, timeout_s)
    return failed.value.code(), time.monotonic() - started


def test_grpc_calls_and_raw_bytes_pass_unchanged(
    proxy: TcpFaultProxy, channel: grpc.Channel
) -> None:
    assert check(channel, 10) == SERVING
    payload = os.urandom(3_000_000)
    with socket.create_connection(_host_port(proxy.address("echo")), timeout=30) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        received = _receive(sock, len(payload))
        sender.join()
        assert proxy.status()["echo"] == RouteStatus(
            mode="pass", delay_ms=0, links=1, answers_lost_bytes=0
        )
    assert received == payload


def test_a_cut_fails_calls_fast_with_unavailable_and_heal_restores(
    proxy: TcpFaultProxy, channel: grpc.Channel
) -> None:
    assert check(channel, 10) == SERVING  # a connection open through the proxy
    assert proxy.status()["grpc"].links == 1

    proxy.cut("grpc")
    assert proxy.status()["grpc"] == RouteStatus(
        mode="cut", delay_ms=0, links=0, answers_lost_bytes=0
    )
    code, took_s = failed_call(channel, timeout_s=20)
    assert code is grpc.StatusCode.UNAVAILABLE
    assert took_s < 10, "a cut must fail a call long before its deadline"
    with grpc.insecure_channel(proxy.address("grpc"), options=CHANNEL_OPTIONS) as fresh:
        assert failed_call(fresh, timeout_s=20)[0] is grpc.StatusCode.UNAVAILABLE

    proxy.heal("grpc")
    assert check(channel, 30, wait_for_ready=True) == SERVING


def test_a_blackhole_makes_calls_reach_their_deadline_and_heal_restores(
    proxy: TcpFaultProxy, channel: grpc.Channel
) -> None:
    assert check(channel, 10) == SERVING

    proxy.blackhole("grpc")
    code, took_s = failed_call(channel, timeout_s=1)
    assert code is grpc.StatusCode.DEADLINE_EXCEEDED
    assert took_s >= 1
    assert proxy.status()["grpc"].links == 1  # the connection is held, not closed
    with grpc.insecure_channel(proxy.address("grpc"), options=CHANNEL_OPTIONS) as fresh:
        assert failed_call(fresh, timeout_s=1)[0] is grpc.StatusCode.DEADLINE_EXCEEDED

        proxy.heal("grpc")
        assert check(fresh, 30, wait_for_ready=True) == SERVING
    assert check(channel, 30) == SERVING  # the same connection, as when a partition heals


def test_lost_answers_reach_the_upstream_and_never_come_back(proxy: TcpFaultProxy) -> None:
    with socket.create_connection(_host_port(proxy.address("echo")), timeout=30) as sock:
        sock.sendall(b"before")
        assert _receive(sock, 6) == b"before"

        proxy.lose_answers("echo")
        sock.sendall(b"lost")
        deadline = time.monotonic() + 30
        while proxy.status()["echo"].answers_lost_bytes < 4:  # the echo answered; dropped
            assert time.monotonic() < deadline, "the request never reached the upstream"
            time.sleep(0.01)

        proxy.heal("echo")
        sock.sendall(b"after")
        assert _receive(sock, 5) == b"after"  # not "lostafter": the answer is gone


def test_a_delay_slows_each_direction_and_heal_removes_it(
    proxy: TcpFaultProxy, channel: grpc.Channel
) -> None:
    assert check(channel, 10) == SERVING

    delay_s = 1.0
    proxy.delay("grpc", int(delay_s * 1000))
    assert proxy.status()["grpc"] == RouteStatus(
        mode="pass", delay_ms=int(delay_s * 1000), links=1, answers_lost_bytes=0
    )
    started = time.monotonic()
    assert check(channel, 30) == SERVING
    assert time.monotonic() - started >= 2 * delay_s  # the request's delay, then the answer's

    proxy.heal("grpc")
    started = time.monotonic()
    assert check(channel, 30) == SERVING
    assert time.monotonic() - started < delay_s  # not even one direction's delay


def test_a_fault_on_one_route_leaves_the_others_alone(
    proxy: TcpFaultProxy, channel: grpc.Channel
) -> None:
    proxy.cut("echo")
    assert check(channel, 10) == SERVING
    # Accepted by the kernel, then reset by the proxy: the reset may even beat connect().
    with (
        pytest.raises(ConnectionResetError),
        socket.create_connection(_host_port(proxy.address("echo")), timeout=30) as sock,
    ):
        sock.recv(1)


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        ({"command": "cut", "route": "nowhere"}, "no route 'nowhere'"),
        ({"command": "drop", "route": "grpc"}, "unknown command 'drop'"),
        ({"command": "delay", "route": "grpc", "delay_ms": -5}, "delay_ms must be"),
        ({"route": "grpc"}, "command"),
    ],
    ids=["unknown-route", "unknown-command", "negative-delay", "no-command"],
)
def test_bad_commands_are_refused_with_a_reason(
    proxy: TcpFaultProxy, request_: dict[str, Any], error: str
) -> None:
    with pytest.raises(FaultProxyError, match=error):
        proxy._send(request_)
    assert proxy.status()["grpc"].mode == "pass"


def test_a_listen_port_chosen_beforehand_is_used(grpc_upstream: str) -> None:
    """Brokers are told each other's addresses before they start: the proxy's ports."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with TcpFaultProxy.start({"grpc": grpc_upstream}, listen_ports={"grpc": port}) as proxy:
        assert proxy.address("grpc") == f"127.0.0.1:{port}"
        with grpc.insecure_channel(proxy.address("grpc")) as channel:
            assert check(channel, 10) == SERVING


def test_the_proxy_exits_on_sigterm_and_closes_its_connections(
    proxy: TcpFaultProxy, channel: grpc.Channel
) -> None:
    assert check(channel, 10) == SERVING
    proxy.close()
    assert proxy.process.returncode == 0
    assert failed_call(channel, timeout_s=20)[0] is grpc.StatusCode.UNAVAILABLE


def _receive(sock: socket.socket, size: int) -> bytes:
    received = b""
    while len(received) < size:
        chunk = sock.recv(size - len(received))
        assert chunk, f"the connection closed after {received!r}"
        received += chunk
    return received


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)
