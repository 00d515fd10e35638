"""SIGTERM: calls in flight are answered, then the logs shut down cleanly."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc
from tierlog.storage.checkpoints import (
    CLEAN_SHUTDOWN_MARKER,
    RECOVERY_POINT_CHECKPOINT,
    read_offset_checkpoint,
)
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Sidecar, SidecarFactory


def assert_closed_cleanly(
    sidecar: Sidecar, sidecar_factory: SidecarFactory, topic: str, log_end_offset: int
) -> None:
    """The marker and the recovery point of a clean shutdown, and a restart on the same
    data dir that serves ``topic``'s partition 0 up to ``log_end_offset``."""
    assert (sidecar.data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    checkpoint = read_offset_checkpoint(sidecar.data_dir / RECOVERY_POINT_CHECKPOINT)
    assert checkpoint == {TopicPartition(topic, 0): log_end_offset}
    again = sidecar_factory(sidecar.data_dir)
    fetched = again.log.Fetch(log_service_pb2.FetchRequest(topic=topic, offset=0))
    assert fetched.high_watermark == log_end_offset


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
    assert_closed_cleanly(sidecar, sidecar_factory, "down", 20)


def test_a_producers_open_stream_ends_at_the_stop_without_waiting_out_the_grace(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    """A producer keeps its stream open between requests; a stopping broker takes no new
    request on it and ends it once what it took is answered (Kafka's broker closes its
    connections), instead of holding its stop for the grace (issue 29)."""
    grace_s = 20.0
    sidecar = sidecar_factory(tmp_path / "data", f"tierlog.shutdown.grace.ms={grace_s * 1000:.0f}")
    sidecar.create_topic("held")
    batch = build_batch([SimpleRecord(b"k", b"v", 1_000, ())] * 4)
    release = threading.Event()

    def requests() -> Iterator[log_service_pb2.ProduceStreamRequest]:
        yield log_service_pb2.ProduceStreamRequest(
            produce=log_service_pb2.ProduceRequest(topic="held", record_batches=batch)
        )
        release.wait(60)  # the producer's stream stays open, with nothing more to send

    # A channel of its own: the sidecar's closes when it stops, which would end the call too.
    with grpc.insecure_channel(sidecar.address) as channel, ThreadPoolExecutor(1) as pool:
        stream = log_service_pb2_grpc.LogServiceStub(channel).ProduceStream(requests())
        assert next(stream).produced.base_offset == 0
        ended = pool.submit(list, stream)  # the answers after the first: none
        try:
            started = time.monotonic()
            assert sidecar.stop() == 0
            stopped_s = time.monotonic() - started
            assert ended.result(timeout=5) == []  # ended, not cut off
        finally:
            release.set()
    assert stopped_s < grace_s / 2, stopped_s
    assert "stopped cleanly" in sidecar.output
    assert_closed_cleanly(sidecar, sidecar_factory, "held", 4)
