"""The transaction coordinator in a replicated cluster: ``__transaction_state`` is created
with three replicas, and when the coordinator's broker is killed mid-transaction the new
leader of its partition, loading the replicated state, takes the producer's commit and
writes its marker, which the client reaches by finding the coordinator again."""

from __future__ import annotations

import pytest

from tests.support.transaction_markers import Marker, markers
from tierlog.client import (
    Cluster,
    ConsumerGroupMetadata,
    GroupClient,
    OffsetAndMetadata,
    Producer,
    TopicPartition,
)
from tierlog.coordinator.offsets_topic import OFFSETS_TOPIC
from tierlog.coordinator.transaction_topic import (
    TRANSACTION_STATE_TOPIC,
    partition_for_transactional_id,
)

from .conftest import ClusterFactory, wait_for
from .test_failover import FAST_FAILOVER

TRANSACTIONAL_ID = "payments"
PARTITIONS = 3


def test_a_transaction_survives_its_coordinators_death(
    replicated_brokers: ClusterFactory,
) -> None:
    cluster = replicated_brokers(
        3, *FAST_FAILOVER, f"transaction.state.log.num.partitions={PARTITIONS}"
    )
    cluster.create_topic("orders", (0, 1, 2))
    producer = Producer(
        {"bootstrap.servers": cluster.servers, "transactional.id": TRANSACTIONAL_ID}
    )
    try:
        producer.init_transactions()
        partition = partition_for_transactional_id(TRANSACTIONAL_ID, PARTITIONS)
        state = cluster.state(TRANSACTION_STATE_TOPIC, partition)
        assert sorted(state.replicas) == [0, 1, 2]  # transaction.state.log.replication.factor
        coordinator = state.leader
        producer.begin_transaction()
        producer.send("orders", b"paid", partition=0).result()
        wait_for(
            lambda: len(cluster.state(TRANSACTION_STATE_TOPIC, partition).isr) == 3,
            "a full ISR of the transaction's state",
        )
        cluster.broker(coordinator).kill()  # the transaction is Ongoing there
        wait_for(
            lambda: (
                cluster.state(TRANSACTION_STATE_TOPIC, partition).leader not in (coordinator, -1)
            ),
            "a new leader of the transaction's state",
        )
        producer.commit_transaction()  # NOT_COORDINATOR / lost connection: found again
        assert producer.idempotence is not None
        pid = producer.idempotence.producer_id_and_epoch
    finally:
        producer.close()
    leader = cluster.state("orders", 0).leader
    found = markers(cluster.broker(leader).data_dir / "orders-0")
    assert found == [Marker(True, pid.producer_id, pid.epoch)]


@pytest.mark.parametrize("commit", [True, False])
def test_transactional_offsets_survive_their_group_coordinators_death(
    replicated_brokers: ClusterFactory, commit: bool
) -> None:
    """Offsets sent in a transaction, then the group coordinator's broker killed: the new
    leader of the group's ``__consumer_offsets`` partition loads them as pending, takes
    the transaction's marker, and the group's offsets follow the outcome."""
    cluster = replicated_brokers(
        3,
        *FAST_FAILOVER,
        f"transaction.state.log.num.partitions={PARTITIONS}",
        "offsets.topic.num.partitions=1",
    )
    cluster.create_topic("orders", (0, 1, 2))
    tp = TopicPartition("orders", 0)
    client = Cluster(cluster.servers.split(","))
    producer = Producer(
        {"bootstrap.servers": cluster.servers, "transactional.id": TRANSACTIONAL_ID}
    )
    try:
        group = GroupClient(client, "etl")
        group.commit({tp: OffsetAndMetadata(2)})
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            {tp: OffsetAndMetadata(6)}, ConsumerGroupMetadata("etl")
        )
        wait_for(
            lambda: len(cluster.state(OFFSETS_TOPIC, 0).isr) == 3,
            "a full ISR of the group's offsets",
        )
        coordinator = cluster.state(OFFSETS_TOPIC, 0).leader
        cluster.broker(coordinator).kill()  # the offsets are pending there
        wait_for(
            lambda: cluster.state(OFFSETS_TOPIC, 0).leader not in (coordinator, -1),
            "a new group coordinator",
        )
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
        found = group.committed([tp])[tp]  # require_stable: no longer pending
        assert found is not None and found.offset == (6 if commit else 2)
    finally:
        producer.close()
        client.close()
