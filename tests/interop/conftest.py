"""Fixtures for the interop tests: Kafka's installed jars, brokers, and a Kafka-written log.

``kafka_written_log`` is the one to build on: a partition directory that a real Kafka
4.1.1 broker wrote (several segments, every codec, keys, null keys and values, headers,
explicit and out-of-order timestamps) and then closed cleanly, with the list of what
was produced (offsets, timestamps, keys, values, headers). It is shared by the whole
session, so treat it as read-only; ``kafka_log_copy`` gives a test its own copy.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .datasets import (
    RECORDS_PER_BATCH,
    WRITTEN_TOPIC,
    WRITTEN_TOPIC_CONFIGS,
    KafkaWrittenLog,
    interop_records,
)
from .kafka import KafkaBroker, KafkaTools


@pytest.fixture(scope="session")
def kafka_tools() -> KafkaTools:
    """Kafka's jars as ``make tools`` installed them; an error (not a skip) if missing."""
    return KafkaTools.locate()


BrokerFactory = Callable[..., KafkaBroker]


@pytest.fixture(scope="session")
def kafka_broker_factory(
    kafka_tools: KafkaTools, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerFactory]:
    """``start(name, **broker_configs)``: a started broker in a fresh work dir; all the
    brokers still running are stopped at the end of the session."""
    brokers: list[KafkaBroker] = []

    def start(name: str = "broker", **broker_configs: str) -> KafkaBroker:
        workdir = tmp_path_factory.mktemp(f"kafka-{name}")
        broker = KafkaBroker(kafka_tools, workdir, broker_configs=broker_configs)
        brokers.append(broker)
        return broker.start()

    yield start
    for broker in brokers:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_written_log(kafka_broker_factory: BrokerFactory) -> KafkaWrittenLog:
    """Start a broker, write ``interop_records()`` in batches of 25 through the real
    producer, stop it cleanly; the partition directory is what Kafka left behind."""
    broker = kafka_broker_factory("written-log")
    broker.create_topic(WRITTEN_TOPIC, WRITTEN_TOPIC_CONFIGS)
    produced = broker.produce(WRITTEN_TOPIC, interop_records(), flush_every=RECORDS_PER_BATCH)
    broker.stop()
    return KafkaWrittenLog(
        log_dir=broker.log_dir,
        partition_dir=broker.partition_dir(WRITTEN_TOPIC),
        topic=WRITTEN_TOPIC,
        topic_configs=dict(WRITTEN_TOPIC_CONFIGS),
        records=sorted(produced, key=lambda record: record.offset),
        broker_log=broker.log_file,
    )


@pytest.fixture
def kafka_log_copy(kafka_written_log: KafkaWrittenLog, tmp_path: Path) -> KafkaWrittenLog:
    """A private copy of ``kafka_written_log``'s log dir, for tests that change files."""
    log_dir = tmp_path / "data"
    shutil.copytree(kafka_written_log.log_dir, log_dir)
    return dataclasses.replace(
        kafka_written_log,
        log_dir=log_dir,
        partition_dir=log_dir / kafka_written_log.partition_dir.name,
    )
