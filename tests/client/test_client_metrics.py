"""The clients' ``metrics()``: Kafka's names, its windowed rates, and figures that follow
what a real producer and consumer did against a real sidecar."""

from __future__ import annotations

import math

import pytest

from tierlog.client import (
    Consumer,
    ConsumerRecord,
    Producer,
    RecordTooLargeError,
    TopicPartition,
)
from tierlog.client.client_metrics import SAMPLE_WINDOW_S, Sampled

from .conftest import create_topic
from .sidecars import LiveSidecar


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_rate_covers_at_least_one_full_window_and_old_windows_drop_out() -> None:
    clock = Clock()
    sampled = Sampled(clock)
    assert (sampled.rate(), math.isnan(sampled.avg()), math.isnan(sampled.max())) == (
        0.0,
        True,
        True,
    )
    sampled.record(10)
    clock.now += 10
    sampled.record(20)
    # 30 over 10 s elapsed plus the one full window Kafka's Rate always counts.
    assert sampled.rate() == pytest.approx(30 / (10 + SAMPLE_WINDOW_S))
    assert sampled.event_rate() == pytest.approx(2 / (10 + SAMPLE_WINDOW_S))
    assert (sampled.avg(), sampled.max(), sampled.total, sampled.count) == (15, 20, 30, 2)
    clock.now += 2 * SAMPLE_WINDOW_S + 1  # both windows too old now
    assert (sampled.rate(), math.isnan(sampled.avg())) == (0.0, True)
    assert sampled.total == 30  # a total never forgets


def test_the_producers_metrics_follow_its_sends_and_failures(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "measured", max_message_bytes="2000")
    config = {"bootstrap.servers": sidecar.address, "linger.ms": 0, "batch.size": 1000}
    with Producer(config) as producer:
        for n in range(100):
            producer.send("measured", b"%03d" % n + b"x" * 97)
        assert producer.flush(30)
        too_large = producer.send("measured", b"y" * 5000)
        with pytest.raises(RecordTooLargeError):
            too_large.result(timeout=30)
        figures = producer.metrics()
    assert figures["record-send-total"] == 101
    assert figures["record-error-total"] == 1
    assert figures["request-total"] >= 10  # batches of at most 1000 bytes
    assert figures["request-latency-avg"] > 0 and figures["request-latency-max"] > 0
    assert figures["record-send-rate"] > 0 and figures["outgoing-byte-total"] > 100 * 100
    assert figures["batch-size-max"] <= 1000 + 5100  # the one too large went alone
    assert figures["buffer-available-bytes"] == figures["buffer-total-bytes"] == 32 * 1024**2


def test_the_consumers_metrics_count_records_and_lag(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "measured")
    with Producer({"bootstrap.servers": sidecar.address, "linger.ms": 0}) as producer:
        for n in range(100):
            producer.send("measured", b"%d" % n, partition=0)
        assert producer.flush(30)
    config = {
        "bootstrap.servers": sidecar.address,
        "auto.offset.reset": "earliest",
        "max.poll.records": 10,
    }
    with Consumer(config) as consumer:
        consumer.assign([TopicPartition("measured", 0)])
        first: list[ConsumerRecord] = []
        for _ in range(20):
            first = first or consumer.poll(1000)
        assert len(first) == 10
        lagging = consumer.metrics()
        assert lagging["records-consumed-total"] == 10
        assert lagging["records-lag-max"] == 90  # the high watermark 100, position 10
        while consumer.position(TopicPartition("measured", 0)) < 100:
            consumer.poll(1000)
        caught_up = consumer.metrics()
    assert caught_up["records-consumed-total"] == 100
    assert caught_up["records-lag-max"] == 0
    assert caught_up["fetch-total"] >= 1 and caught_up["bytes-consumed-total"] > 100
