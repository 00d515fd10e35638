"""Fixtures for the interop tests: Kafka's installed jars, brokers, and a Kafka-written log.

``kafka_written_log`` is the one to build on: a partition directory that a real Kafka
4.1.1 broker wrote (several segments, every codec, keys, null keys and values, headers,
explicit and out-of-order timestamps) and then closed cleanly, with the list of what
was produced (offsets, timestamps, keys, values, headers). ``kafka_unclean_log`` is
the same log as it was on disk while the broker ran (a crash image, for recovery).
Both are shared by the whole session, so treat them as read-only;
``kafka_log_copy`` and ``kafka_unclean_log_copy`` give a test its own copy.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Iterator, Mapping
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
    """``start(name, *, log_levels=None, **broker_configs)``: a started broker in a fresh
    work dir (``log_levels``: see ``KafkaBroker.log_levels``); all the brokers still
    running are stopped at the end of the session."""
    brokers: list[KafkaBroker] = []

    def start(
        name: str = "broker", *, log_levels: Mapping[str, str] | None = None, **broker_configs: str
    ) -> KafkaBroker:
        workdir = tmp_path_factory.mktemp(f"kafka-{name}")
        broker = KafkaBroker(
            kafka_tools, workdir, broker_configs=broker_configs, log_levels=log_levels or {}
        )
        brokers.append(broker)
        return broker.start()

    yield start
    for broker in brokers:
        broker.stop()


@pytest.fixture(scope="session")
def _kafka_written_logs(
    kafka_broker_factory: BrokerFactory,
) -> tuple[KafkaWrittenLog, KafkaWrittenLog]:
    """One broker run gives both logs: a copy of the log dir taken while the broker is
    up and idle (what a kill -9 or power cut leaves: preallocated active indexes, no
    clean-shutdown marker), then the log dir after a clean shutdown."""
    broker = kafka_broker_factory("written-log")
    broker.create_topic(WRITTEN_TOPIC, WRITTEN_TOPIC_CONFIGS)
    produced = broker.produce(WRITTEN_TOPIC, interop_records(), flush_every=RECORDS_PER_BATCH)
    unclean_log_dir = broker.workdir / "unclean-data"
    shutil.copytree(broker.log_dir, unclean_log_dir)
    broker.stop()
    clean = KafkaWrittenLog(
        log_dir=broker.log_dir,
        partition_dir=broker.partition_dir(WRITTEN_TOPIC),
        topic=WRITTEN_TOPIC,
        topic_configs=dict(WRITTEN_TOPIC_CONFIGS),
        records=sorted(produced, key=lambda record: record.offset),
        broker_log=broker.log_file,
    )
    return clean, _moved(clean, unclean_log_dir)


def _moved(written: KafkaWrittenLog, log_dir: Path) -> KafkaWrittenLog:
    return dataclasses.replace(
        written, log_dir=log_dir, partition_dir=log_dir / written.partition_dir.name
    )


@pytest.fixture(scope="session")
def kafka_written_log(
    _kafka_written_logs: tuple[KafkaWrittenLog, KafkaWrittenLog],
) -> KafkaWrittenLog:
    """A log a real broker wrote through the real producer (``interop_records()`` in
    batches of 25) and then shut down cleanly: closed segments, trimmed indexes,
    ``.kafka_cleanshutdown``. Shared by the session: do not modify."""
    return _kafka_written_logs[0]


@pytest.fixture(scope="session")
def kafka_unclean_log(
    _kafka_written_logs: tuple[KafkaWrittenLog, KafkaWrittenLog],
) -> KafkaWrittenLog:
    """The same log as the running broker had it on disk: what recovery after a crash
    starts from. Shared by the session: do not modify (copy it first)."""
    return _kafka_written_logs[1]


@pytest.fixture
def kafka_log_copy(kafka_written_log: KafkaWrittenLog, tmp_path: Path) -> KafkaWrittenLog:
    """A private copy of ``kafka_written_log``'s log dir, for tests that change files."""
    shutil.copytree(kafka_written_log.log_dir, tmp_path / "data")
    return _moved(kafka_written_log, tmp_path / "data")


@pytest.fixture
def kafka_unclean_log_copy(kafka_unclean_log: KafkaWrittenLog, tmp_path: Path) -> KafkaWrittenLog:
    """A private copy of ``kafka_unclean_log``'s log dir, for recovery tests."""
    shutil.copytree(kafka_unclean_log.log_dir, tmp_path / "unclean-data")
    return _moved(kafka_unclean_log, tmp_path / "unclean-data")
