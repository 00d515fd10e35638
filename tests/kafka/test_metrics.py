"""The Kafka listener's series (docs/METRICS.md, "Kafka listener"), scraped off a real
sidecar: each request counted under its API by the answer's first error code, every
error code counted per partition, latency and frame bytes exact, connections open and
closed by why."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar
from tests.kafka.test_protocol import (
    FETCH,
    FETCH_V,
    METADATA,
    METADATA_V,
    NO_ID,
    PRODUCE,
    PRODUCE_V,
    _batch,
    _fetch,
    _metadata,
    _produce,
)
from tests.kafka.wire import KafkaWire
from tests.support.scrape import METRICS, Scrape, scrape_sidecar
from tests.support.sidecars import Sidecars


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        yield start_kafka_sidecar(started, tmp_path_factory.mktemp("metrics") / "data", METRICS)


def _until(sidecar: KafkaSidecar, name: str, value: float, **labels: str) -> Scrape:
    """Scrapes until ``name{labels}`` is ``value`` (a connection's end is counted once
    the broker has seen it, after the client's close returned)."""
    deadline = time.monotonic() + 10
    while (found := scrape_sidecar(sidecar)).value(name, **labels) != value:
        assert time.monotonic() < deadline, f"{name}{labels}: {found.value(name, **labels)}"
        time.sleep(0.05)
    return found


def test_requests_errors_latency_and_bytes_are_counted_per_api(sidecar: KafkaSidecar) -> None:
    sidecar.create_topic("counted")
    before = scrape_sidecar(sidecar)
    assert before.value("tierlog_kafka_requests_total", api="Produce", code="NONE") == 0

    wire = KafkaWire(sidecar.kafka_port)
    try:
        for value in (b"a", b"b", b"c"):
            wire.call(PRODUCE, PRODUCE_V, _produce("counted", _batch(value)))
        wire.call(PRODUCE, PRODUCE_V, _produce("missing", _batch(b"x")))
        two_missing: list[dict[str, object]] = [
            {"name": name, "topic_id": NO_ID} for name in ("gone", "lost")
        ]
        wire.call(METADATA, METADATA_V, _metadata(two_missing))
        wire.call(FETCH, FETCH_V, _fetch("counted", 0))
        found = _until(sidecar, "tierlog_kafka_connections", 1)
    finally:
        wire.close()

    def count(name: str, **labels: str) -> float:
        return found.value(name, **labels) - before.value(name, **labels)

    assert count("tierlog_kafka_requests_total", api="Produce", code="NONE") == 3
    unknown = "UNKNOWN_TOPIC_OR_PARTITION"
    assert count("tierlog_kafka_requests_total", api="Produce", code=unknown) == 1
    assert count("tierlog_kafka_errors_total", api="Produce", reason=unknown) == 1
    # One request, two topics unknown: one request failed, two errors (Kafka's ErrorsPerSec).
    assert count("tierlog_kafka_requests_total", api="Metadata", code=unknown) == 1
    assert count("tierlog_kafka_errors_total", api="Metadata", reason=unknown) == 2
    assert count("tierlog_kafka_requests_total", api="Fetch", code="NONE") == 1
    assert count("tierlog_kafka_request_duration_seconds_count", api="Produce") == 4
    assert count("tierlog_kafka_request_duration_seconds_sum", api="Fetch") > 0
    apis = ("Produce", "Metadata", "Fetch")
    assert sum(count("tierlog_kafka_request_bytes_total", api=api) for api in apis) == (
        wire.bytes_sent
    )
    assert sum(count("tierlog_kafka_response_bytes_total", api=api) for api in apis) == (
        wire.bytes_received
    )


def test_connections_are_gauged_and_their_ends_counted_by_why(sidecar: KafkaSidecar) -> None:
    closed = "tierlog_kafka_connections_closed_total"
    before = scrape_sidecar(sidecar)
    assert before.value("tierlog_kafka_connections") == 0
    wire = KafkaWire(sidecar.kafka_port)
    wire.sock.sendall(b"\0\0\0\1x")  # a size too small for a header: closed by the broker
    _until(
        sidecar,
        closed,
        before.value(closed, reason="invalid_request") + 1,
        reason="invalid_request",
    )
    wire.close()

    polite = KafkaWire(sidecar.kafka_port)
    _until(sidecar, "tierlog_kafka_connections", 1)
    polite.close()
    after = _until(sidecar, "tierlog_kafka_connections", 0)
    assert after.value(closed, reason="client") == before.value(closed, reason="client") + 1
    assert (
        after.value("tierlog_kafka_connections_refused_total", reason="max_connections_per_ip") == 0
    )
