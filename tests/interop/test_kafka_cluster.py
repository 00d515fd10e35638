"""The harness's three-broker Kafka (``KafkaCluster``), proven against Kafka itself: a
topic of replication factor 3 lands on every broker, and killing its leader with SIGKILL
moves the leadership to a surviving replica that takes ``acks=all`` produce."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .kafka import KafkaCluster, KafkaTools, ProducerRecord

pytestmark = pytest.mark.interop

TOPIC = "replicated"


@pytest.fixture
def cluster(kafka_tools: KafkaTools, tmp_path: Path) -> Iterator[KafkaCluster]:
    # A short session, so that the controller fences a killed broker within the test.
    configs = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "500"}
    with KafkaCluster(kafka_tools, tmp_path, broker_configs=configs) as cluster:
        yield cluster


def _records(*values: bytes) -> list[ProducerRecord]:
    return [ProducerRecord(key=None, value=value) for value in values]


def test_a_replicated_topic_survives_its_leader_killed(cluster: KafkaCluster) -> None:
    cluster.create_topic(TOPIC, {"min.insync.replicas": "2"})
    leader = cluster.leader(TOPIC)
    assert leader in (0, 1, 2)
    producing = cluster.live_broker()
    acks_all = {"acks": "all"}
    produced = producing.produce(TOPIC, _records(b"a", b"b"), producer_configs=acks_all)
    assert [record.offset for record in produced] == [0, 1]
    for broker in cluster.brokers:  # every broker holds a replica
        assert broker.partition_dir(TOPIC).is_dir()

    cluster.broker(leader).kill()
    assert not cluster.broker(leader).is_running
    deadline = time.monotonic() + 60
    while cluster.leader(TOPIC) in (leader, -1):
        assert time.monotonic() < deadline, "no new leader within 60 s"
        time.sleep(0.2)
    survivor = cluster.live_broker()
    produced = survivor.produce(TOPIC, _records(b"c"), producer_configs=acks_all)
    assert [record.offset for record in produced] == [2]
    read = survivor.consume(TOPIC)
    assert [record.value for record in read.records] == [b"a", b"b", b"c"]
