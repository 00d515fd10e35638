"""SIGTERM: calls in flight are answered, then the logs shut down cleanly."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import grpc

from tierlog.api.v1 import log_service_pb2
from tierlog.storage.checkpoints import (
    CLEAN_SHUTDOWN_MARKER,
    RECOVERY_POINT_CHECKPOINT,
    TopicPartition,
    read_offset_checkpoint,
)
from tierlog.storage.records import SimpleRecord, build_batch

from .conftest import Sidecar, SidecarFactory


def test_sigterm_answers_long_polls_ends_streams_and_leaves_the_marker(
    sidecar: Sidecar, sidecar_factory: SidecarFactory
) -> None:
    sidecar.create_topic("down")
    batch = build_batch([SimpleRecord(b"k", b"v", 1_000, ())] * 4)
    for _ in range(5):
        sidecar.log.Produce(log_service_pb2.ProduceRequest(topic="down", record_batches=batch))
    stream = sidecar.log.Subscribe(log_service_pb2.SubscribeRequest(topic="down", offset=-1))
    with ThreadPoolExecutor(2) as pool:
        poll = pool.submit(
            sidecar.log.Fetch,
            log_service_pb2.FetchRequest(topic="down", offset=20, max_wait_ms=30_000),
        )
        tail = pool.submit(list, stream)
        time.sleep(0.5)
        started = time.monotonic()
        assert sidecar.stop() == 0
        assert time.monotonic() - started < 15  # no waiting out the 30 s poll
        assert poll.result(timeout=5).record_batches == b""
        try:
            assert tail.result(timeout=5) == []
        except grpc.RpcError as ended:  # the stream may also end with the channel
            assert ended.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
    output = sidecar.output
    assert "shutting down" in output and "stopped cleanly" in output
    assert (sidecar.data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    checkpoint = read_offset_checkpoint(sidecar.data_dir / RECOVERY_POINT_CHECKPOINT)
    assert checkpoint == {TopicPartition("down", 0): 20}

    again = sidecar_factory(sidecar.data_dir)
    fetched = again.log.Fetch(log_service_pb2.FetchRequest(topic="down", offset=0))
    assert fetched.high_watermark == 20
