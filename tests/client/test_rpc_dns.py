"""A channel to a broker's name follows the name to a new address within seconds.

On Kubernetes a restarted broker's pod answers at a new IP behind the same name, and
the old IP swallows connection attempts. gRPC resolves a name again only when a
connection fails, and by default no sooner than 30 s after the last resolution: a
producer (and a follower, whose replica channels take the same options) kept dialling
the old IP for ~20 s once leadership went back to a restarted broker, holding every
acks=all record for as long. Here a small DNS server on loopback, which the channel's
target names (``dns://SERVER/NAME:PORT``), moves the name from a socket that listens
but never answers to a real gRPC server, as the cluster's DNS moves a pod's name.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tierlog.client.rpc import CHANNEL_OPTIONS


class NameServer:
    """Answers A queries for every name with ``self.address`` (TTL 0); others empty."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.port: int = self.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                query, sender = self.socket.recvfrom(512)
            except OSError:  # closed
                return
            self.socket.sendto(self._answer(query), sender)

    def _answer(self, query: bytes) -> bytes:
        end = 12
        while query[end]:
            end += query[end] + 1
        question = query[12 : end + 5]  # the name, its zero byte, QTYPE and QCLASS
        qtype = struct.unpack("!H", query[end + 1 : end + 3])[0]
        answers = b""
        if qtype == 1:  # A
            rdata = socket.inet_aton(self.address)
            answers = struct.pack("!HHHIH", 0xC00C, 1, 1, 0, len(rdata)) + rdata
        header = struct.pack(
            "!HHHHHH", struct.unpack("!H", query[:2])[0], 0x8180, 1, 1 if answers else 0, 0, 0
        )
        return header + question + answers

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def silent_and_serving() -> Iterator[tuple[str, str, int]]:
    """A port on two loopback addresses: one listens and never answers (the old pod's
    IP), the other is a gRPC server with a health service (the new pod's)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.3:0")
    with socket.socket() as silent:
        silent.bind(("127.0.0.2", port))
        silent.listen(8)
        server.start()
        try:
            yield "127.0.0.2", "127.0.0.3", port
        finally:
            server.stop(None)


def test_a_channel_follows_a_brokers_name_to_its_new_address_within_seconds(
    silent_and_serving: tuple[str, str, int],
) -> None:
    old, new, port = silent_and_serving
    names = NameServer(old)
    channel = grpc.insecure_channel(
        f"dns://127.0.0.1:{names.port}/broker.test:{port}", options=CHANNEL_OPTIONS
    )
    stub: Any = health_pb2_grpc.HealthStub(channel)  # typeshed: no methods
    try:
        with pytest.raises(grpc.RpcError):  # the old address swallows the attempt
            stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
        names.address = new  # the pod came back elsewhere
        moved = time.monotonic()
        while True:
            try:
                stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                break
            except grpc.RpcError:
                assert time.monotonic() - moved < 10, "still dialling the old address"
        print(f"\nfollowed the name in {time.monotonic() - moved:.1f} s")
    finally:
        channel.close()
        names.close()
