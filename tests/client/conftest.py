"""Helpers for the client tests: a clock the test moves, reading batches back, and real
sidecars (``sidecars``: a factory that stops what it started)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support.sidecars import SidecarProcess, Sidecars, start_sidecar
from tierlog.client.accumulator import AppendResult, MemoryBlocked, RecordAccumulator
from tierlog.client.admin import AdminClient
from tierlog.client.config import ProducerConfig
from tierlog.client.consumer import Consumer, ConsumerRecord
from tierlog.client.idempotence import IdempotenceManager
from tierlog.client.producer_batch import ProducerBatch
from tierlog.storage.records import (
    BatchHeader,
    Record,
    SimpleRecord,
    crc_is_valid,
    decode_records,
    parse_header,
)

from .sidecars import LiveSidecar, free_port


class FakeClock:
    """Milliseconds that move only when the test says."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def producer(
    clock: FakeClock,
    props: Mapping[str, object] | None = None,
    *,
    idempotent: bool = False,
) -> tuple[RecordAccumulator, IdempotenceManager | None]:
    """An accumulator over Kafka-named ``props``, with bookkeeping that already has a
    producer id when ``idempotent``."""
    config = ProducerConfig.from_properties(props or {})
    manager = IdempotenceManager() if idempotent else None
    if manager is not None:
        manager.set_producer_id_and_epoch(1000, 0)
    return RecordAccumulator(config, clock, idempotence=manager), manager


def add(
    acc: RecordAccumulator, topic: str, record: SimpleRecord, **options: Any
) -> AppendResult | MemoryBlocked:
    """``acc.append`` of ``record``'s fields."""
    return acc.append(
        topic,
        record.key,
        record.value,
        timestamp=record.timestamp,
        headers=tuple(record.headers),
        **options,
    )


def appended(result: AppendResult | MemoryBlocked) -> AppendResult:
    assert isinstance(result, AppendResult), result
    return result


def read_back(batch: ProducerBatch) -> tuple[BatchHeader, list[Record]]:
    """The header and records of a drained batch, checked as the broker checks them."""
    data = batch.close()
    header = parse_header(data)
    assert header.size == len(data)
    assert crc_is_valid(data, header)
    return header, decode_records(data, header)


def as_simple(records: list[Record]) -> list[SimpleRecord]:
    return [SimpleRecord(r.key, r.value, r.timestamp, r.headers) for r in records]


SidecarStarter = Callable[..., LiveSidecar]


@pytest.fixture
def sidecars(tmp_path: Path) -> Iterator[SidecarStarter]:
    """``sidecars(name, *configs, port=0)``: a running sidecar with its data in
    ``tmp_path / name``; every one still running is killed at the end."""
    started = Sidecars()

    def start(name: str = "data", *configs: str, port: int = 0) -> SidecarProcess:
        return started.add(start_sidecar(tmp_path / name, *configs, port=port))

    yield start
    started.kill_all()


@pytest.fixture
def sidecar(sidecars: SidecarStarter) -> LiveSidecar:
    return sidecars()


def create_topic(address: str, name: str, partitions: int = 1, **configs: str) -> None:
    with AdminClient(address) as admin:
        admin.create_topic(
            name, partitions, {key.replace("_", "."): value for key, value in configs.items()}
        )


def two_brokers(sidecars: SidecarStarter) -> tuple[LiveSidecar, LiveSidecar]:
    """Two unreplicated brokers sharing the topic "spread" (6 partitions), each partition
    owned by one of them."""
    ports = [free_port(), free_port()]
    brokers = f"tierlog.cluster.brokers=0@127.0.0.1:{ports[0]},1@127.0.0.1:{ports[1]}"
    first = sidecars("b0", "node.id=0", brokers, port=ports[0])
    second = sidecars("b1", "node.id=1", brokers, port=ports[1])
    create_topic(first.address, "spread", partitions=6)  # the admin client tells both
    return first, second


def poll_until(consumer: Consumer, count: int, timeout_s: float = 10) -> list[ConsumerRecord]:
    """What ``consumer`` polls until it has ``count`` records or ``timeout_s`` passed."""
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records += consumer.poll(200)
    return records
