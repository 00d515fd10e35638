"""``error_from_rpc`` on real failed calls: a connection the sidecar's death broke is a
retriable NETWORK_EXCEPTION however gRPC words it; the sidecar's own errors keep their
Kafka name."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc
from tierlog.client.errors import NetworkError, is_retriable, reason_of
from tierlog.client.produce_wire import encode_produce_stream_request, produce_stream
from tierlog.client.rpc import error_from_rpc, open_aio_channel, open_channel
from tierlog.storage.records import SimpleRecord, build_batch

from .conftest import create_topic
from .sidecars import LiveSidecar


async def _write_after_kill(sidecar: LiveSidecar) -> grpc.RpcError:
    """A produce stream's next write, made after kill -9 of its sidecar and before the
    stream's end was read: gRPC fails it INTERNAL ("Internal error from Core"), or
    UNAVAILABLE ("Stream removed") when its core's own thread saw the socket close
    while ``kill`` waited for the process (seen once under load): which one is gRPC's
    race, not ours."""
    channel = open_aio_channel(sidecar.address)
    try:
        call = produce_stream(channel, ())
        request = encode_produce_stream_request(
            "restarts", 0, log_service_pb2.ACKS_ALL, [build_batch([SimpleRecord(None, b"v", 1)])]
        )
        await call.write(request)
        answer = await call.read()
        assert isinstance(answer, log_service_pb2.ProduceStreamResponse)
        assert answer.WhichOneof("result") == "produced"
        sidecar.kill()  # no await since: the loop has not seen the connection end
        with pytest.raises(grpc.RpcError) as failed:
            await call.write(request)
            await call.read()
        return failed.value
    finally:
        await channel.close()


def test_a_write_into_a_stream_broken_by_a_sidecar_kill_is_a_retriable_network_error(
    sidecar: LiveSidecar,
) -> None:
    create_topic(sidecar.address, "restarts")
    failure = asyncio.run(_write_after_kill(sidecar))
    # what gRPC says, with no reason attached: either side of its core's race
    assert failure.code() in {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE}
    error = error_from_rpc(failure)
    assert isinstance(error, NetworkError) and is_retriable(error)


@pytest.mark.parametrize(
    ("code", "details"),
    [
        (grpc.StatusCode.INTERNAL, "Internal error from Core"),
        (grpc.StatusCode.UNAVAILABLE, "Stream removed"),
        (grpc.StatusCode.UNKNOWN, "Stream removed"),
        (grpc.StatusCode.CANCELLED, "Channel closed!"),
    ],
)
def test_each_status_grpc_gives_a_broken_connection_is_a_retriable_network_error(
    code: grpc.StatusCode, details: str
) -> None:
    """The statuses gRPC itself raises for a connection that broke, with no reason from
    the sidecar, each as gRPC's own error type builds it: which one a kill gives is
    timing (the test above), so each is checked here on its own."""
    failure = grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)
    error = error_from_rpc(failure)
    assert isinstance(error, NetworkError) and is_retriable(error)


def test_the_sidecars_own_error_keeps_its_kafka_name(sidecar: LiveSidecar) -> None:
    channel = open_channel(sidecar.address)
    try:
        stub = log_service_pb2_grpc.LogServiceStub(channel)
        with pytest.raises(grpc.RpcError) as failed:
            stub.Fetch(log_service_pb2.FetchRequest(topic="absent", offset=0), timeout=10)
    finally:
        channel.close()
    error = error_from_rpc(failed.value)
    assert reason_of(error) == "UNKNOWN_TOPIC_OR_PARTITION"
