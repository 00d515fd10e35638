"""A follower's channel to its leader gives up on an address that never answers within
about a second, and so resolves the leader's name again.

On Kubernetes a leader whose pod was replaced answers at a new IP behind the same DNS
name, and the old IP swallows the connection attempt. Here a socket that listens but
never accepts plays it: the kernel completes TCP, and the HTTP/2 handshake never comes.
With gRPC's default the attempt lasts 20 s (and with it every acks=all produce waiting
for this follower, as the end-to-end test of a deleted leader pod measured).
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tierlog.sidecar.config import SidecarConfig
from tierlog.sidecar.server import SidecarServer


def test_a_replica_channel_to_an_address_that_never_answers_fails_within_a_second(
    tmp_path: Path,
) -> None:
    config = SidecarConfig.from_properties({"log.dirs": str(tmp_path / "data")})
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # never accepted: TCP completes, no HTTP/2 answer comes

        async def check() -> float:
            # Made on the loop: gRPC's aio server binds to the running loop (with none
            # current, as after another test closed its loop, it cannot be made).
            server = SidecarServer(config)
            channel = server._replica_channel(f"127.0.0.1:{silent.getsockname()[1]}")
            health: Any = health_pb2_grpc.HealthStub(channel)  # typeshed: no methods
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await health.Check(health_pb2.HealthCheckRequest(), timeout=30)
            await channel.close()
            assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
            return time.monotonic() - started

        assert asyncio.run(check()) < 5
