"""The harness's three-broker Kafka (``KafkaCluster``), proven against Kafka itself: a
topic of replication factor 3 lands on every broker, and killing its leader with SIGKILL
moves the leadership to a surviving replica that takes ``acks=all`` produce; with broker 0
as the controller too (three JVMs, as the benchmarks run it) it serves the same topic."""

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


@pytest.fixture(scope="module")
def combined_cluster(
    kafka_tools: KafkaTools, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaCluster]:
    workdir = tmp_path_factory.mktemp("kafka-combined")
    with KafkaCluster(kafka_tools, workdir, combined_controller=True) as cluster:
        yield cluster


def test_a_cluster_whose_first_broker_is_its_controller_serves_a_replicated_topic(
    combined_cluster: KafkaCluster,
) -> None:
    assert combined_cluster.nodes == combined_cluster.brokers  # three JVMs, no fourth
    assert all(broker.is_running for broker in combined_cluster.brokers)
    combined_cluster.create_topic(TOPIC)  # replication factor 3: every broker
    producing = combined_cluster.broker(2)  # a broker that is no controller
    produced = producing.produce(TOPIC, _records(b"a", b"b"), producer_configs={"acks": "all"})
    assert [record.offset for record in produced] == [0, 1]
    for broker in combined_cluster.brokers:
        assert broker.partition_dir(TOPIC).is_dir()
    read = combined_cluster.broker(1).consume(TOPIC)
    assert [record.value for record in read.records] == [b"a", b"b"]
