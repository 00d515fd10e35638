"""Reassignment between real brokers: a partition moved from brokers {0, 1, 2} to
{1, 2, 3} while an idempotent acks=all producer keeps sending. The new replica joins as a
follower, copies the log and enters the ISR; the brokers' controller then narrows the
replicas to the target, electing broker 1 since the leader (0) leaves. Nothing
acknowledged is lost or duplicated, and the new replica's segments are the leader's."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tierlog.client import Producer
from tierlog.controller.reassignments import (
    COMPLETED,
    IN_PROGRESS,
    reassignment_progress,
    start_reassignments,
)
from tierlog.storage.topic_partition import TopicPartition

from .conftest import ClusterFactory, wait_for

ORDERS_0 = TopicPartition("orders", 0)


def _segments(data_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((data_dir / "orders-0").glob("*.log"))}


def test_a_partition_moves_to_a_new_broker_while_acks_all_producing(
    replicated_brokers: ClusterFactory,
) -> None:
    cluster = replicated_brokers(4, "log.segment.bytes=4000", "replica.lag.time.max.ms=3000")
    cluster.create_topic("orders", (0, 1, 2))
    wait_for(lambda: cluster.state("orders").leader == 0, "broker 0 to lead")
    config = {"bootstrap.servers": cluster.servers, "acks": "all", "linger.ms": 0}
    producer = Producer({**config, "delivery.timeout.ms": 60_000})
    sent: list[bytes] = []
    futures = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            value = b"r%06d" % i
            futures.append(producer.send("orders", value, partition=0))
            sent.append(value)
            i += 1
            time.sleep(0.002)

    worker = threading.Thread(target=produce)
    worker.start()
    try:
        wait_for(lambda: len(sent) > 300, "records before the move")
        plan = {ORDERS_0: (1, 2, 3)}
        start_reassignments(cluster.store, plan, brokers=range(4))
        moving = cluster.state("orders")
        assert moving.replicas == (1, 2, 3, 0) and moving.adding_replicas == (3,)
        assert reassignment_progress(cluster.store, plan)[ORDERS_0] in (IN_PROGRESS, COMPLETED)
        wait_for(
            lambda: reassignment_progress(cluster.store, plan)[ORDERS_0] == COMPLETED,
            "the reassignment to complete",
        )
        done = len(sent)
        wait_for(lambda: len(sent) > done + 300, "records after the move")
    finally:
        stop.set()
        worker.join()
    assert producer.flush(60)
    producer.close()

    state = cluster.state("orders")
    assert (state.replicas, state.leader, state.isr) == ((1, 2, 3), 1, (1, 2, 3))
    assert not state.reassigning
    offsets = [future.result(0).offset for future in futures]
    assert offsets == list(range(len(sent)))  # each acknowledged once, in order, no gap
    assert cluster.read_values("orders", len(sent)) == sent
    new_replica, leader = cluster.broker(3).data_dir, cluster.broker(1).data_dir
    wait_for(lambda: _segments(new_replica) == _segments(leader), "broker 3 to hold the log")
    assert len(_segments(leader)) > 2  # rolled: several segments compared
