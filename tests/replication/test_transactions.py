"""The transaction coordinator in a replicated cluster: ``__transaction_state`` is created
with three replicas, and when the coordinator's broker is killed mid-transaction the new
leader of its partition, loading the replicated state, takes the producer's commit and
writes its marker, which the client reaches by finding the coordinator again."""

from __future__ import annotations

from tests.support.transaction_markers import Marker, markers
from tierlog.client import Producer
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
