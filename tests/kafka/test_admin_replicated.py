"""The Kafka listener's admin APIs on a replicated cluster: topic changes go through the
partition-state store (``replication.topic_changes``, the gRPC AdminService's path too),
so a topic a Kafka client makes on one broker is every broker's, with its replicas."""

from __future__ import annotations

import re
from functools import partial

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidReplicationAssignmentError, InvalidReplicationFactorError

from tests.replication.conftest import ClusterFactory, replicated_brokers, wait_for
from tierlog.client.admin import AdminClient

__all__ = ["replicated_brokers"]  # the fixture, shared with tests/replication


def test_a_topic_made_through_kafka_on_one_broker_is_replicated_on_all(
    replicated_brokers: ClusterFactory,
) -> None:
    # Port 0 (the broker's own free ports are picked apart from it): the log says which.
    cluster = replicated_brokers(3, node_configs={0: ["listeners=PLAINTEXT://127.0.0.1:0"]})
    serving = re.search(r"serving Kafka's wire protocol on (\S+)", cluster.broker(0).output)
    assert serving is not None
    admin = KafkaAdminClient(bootstrap_servers=serving.group(1))
    try:
        admin.create_topics([NewTopic("everywhere", 2, 3, topic_configs={"retention.ms": "9000"})])
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics([NewTopic("too-many", 1, 4)])
        # The client's own placement, checked as Kafka checks it.
        admin.create_topics([NewTopic("placed", replica_assignments={0: [2, 0, 1], 1: [1, 2, 0]})])
        for bad in ({0: [0, 0, 1]}, {0: [0, 9]}, {1: [0]}, {0: [0, 1], 1: [2]}):
            with pytest.raises(InvalidReplicationAssignmentError):
                admin.create_topics([NewTopic("badly-placed", replica_assignments=bad)])
    finally:
        admin.close()

    for broker in cluster.brokers[1:]:
        with AdminClient({"bootstrap.servers": broker.address}) as grpc:
            wait_for(partial(_lists, grpc, "everywhere"), "the topic on every broker")
            (described,) = grpc.describe_topics(["everywhere"])
            assert [sorted(p.replicas) for p in described.partitions] == [[0, 1, 2]] * 2
            assert grpc.describe_configs("everywhere")["retention.ms"].value == "9000"
            assert "too-many" not in grpc.list_topics()
    assert sorted(cluster.store.read_topic("everywhere")) == [0, 1]
    placed = cluster.store.read_topic("placed")
    assert [placed[p].replicas for p in (0, 1)] == [(2, 0, 1), (1, 2, 0)]
    assert "badly-placed" not in cluster.store.list_topics()


def _lists(grpc: AdminClient, topic: str) -> bool:
    return topic in grpc.list_topics()
