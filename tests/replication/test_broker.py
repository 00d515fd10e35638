"""A broker's clean stop ends by giving its lease up (``ReplicatedBroker.stop``): real
brokers, three, whose leases last 30 s, so nothing here can be a lease running out.
Then, in-process over a directory store: a controlled shutdown's hand-over is written
whole before the stopping broker applies any of it.

Kafka's controller fences a broker as soon as its controlled shutdown completes: it
drops out of Metadata and out of the ISRs it could not leave. A tierlog broker's lease
went on counting until it expired, and the survivors listed it to clients meanwhile
(kafka-python sent it requests).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import grpc

from tests.kafka.test_cluster import _metadata_broker_ids
from tests.support.sidecars import free_port
from tierlog.broker.topics import TopicStore
from tierlog.broker.watch import AppendWatch
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import NO_LEADER, PARTITIONS_PER_PART, PartitionState
from tierlog.partition_state.store import PartChange, PartitionStateStore
from tierlog.replication.broker import ReplicatedBroker
from tierlog.replication.config import DirectoryStore, ReplicationConfig
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.storage.config import LogConfig
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Cluster, ClusterFactory, wait_for

SESSION_TIMEOUT_S = 30
# What "at once" must beat: a third of the lease, so a lease running out cannot pass.
GONE_WITHIN_S = SESSION_TIMEOUT_S / 3
STOPPING = 2


def _listed_by_survivors(cluster: Cluster, kafka_ports: list[int]) -> set[int]:
    """The brokers the survivors' Kafka Metadata lists (each survivor's own view)."""
    return {
        node
        for survivor in range(3)
        if survivor != STOPPING
        for node in _metadata_broker_ids(kafka_ports[survivor])
    }


def test_a_broker_stopped_with_sigterm_is_gone_at_once_and_rejoins_when_started(
    replicated_brokers: ClusterFactory,
) -> None:
    """Broker 2 leads ``led``, follows ``followed`` and is the only replica of
    ``alone``, the ISR it cannot leave. Once SIGTERM stopped it, the survivors' Metadata
    lists it no more, it is in no ISR, and ``alone`` is offline (its ISR kept), as for
    a lease expired, well within a lease; started again, it takes its lease in the next
    broker epoch and is back in Metadata and in every ISR."""
    kafka_ports = [free_port() for _ in range(3)]
    listed = ",".join(f"{node}@127.0.0.1:{port}" for node, port in enumerate(kafka_ports))
    cluster = replicated_brokers(
        3,
        f"broker.session.timeout.ms={SESSION_TIMEOUT_S * 1000}",
        "auto.leader.rebalance.enable=false",
        f"tierlog.cluster.kafka.brokers={listed}",
        node_configs={
            node: [f"listeners=PLAINTEXT://127.0.0.1:{port}"]
            for node, port in enumerate(kafka_ports)
        },
    )
    cluster.create_topic("led", (2, 0, 1))
    cluster.create_topic("followed", (0, 1, 2))
    cluster.create_topic("alone", (2,))
    wait_for(lambda: _listed_by_survivors(cluster, kafka_ports) == {0, 1, 2}, "every broker")
    epoch = cluster.store.read_leases()[STOPPING].broker_epoch

    stopped_at = time.monotonic()
    cluster.broker(STOPPING).process.send_signal(signal.SIGTERM)
    wait_for(
        lambda: STOPPING not in _listed_by_survivors(cluster, kafka_ports),
        f"broker {STOPPING} out of the survivors' Metadata",
        timeout_s=GONE_WITHIN_S,
    )
    wait_for(
        lambda: cluster.state("alone").leader == NO_LEADER,
        "alone offline",
        timeout_s=GONE_WITHIN_S - (time.monotonic() - stopped_at),
    )
    # Its own clean exit, waited for: ``stop`` would signal again if it still ran (a
    # loaded machine: the lease is given up before the process's last steps), and a
    # SIGTERM after its event loop has ended, its handlers with it, kills it (-15).
    assert cluster.broker(STOPPING).process.wait(timeout=30) == 0
    cluster.broker(STOPPING).stop()  # its channel closed
    assert cluster.state("alone").isr == (STOPPING,)  # the last in sync, kept
    for topic in ("led", "followed"):
        assert STOPPING not in cluster.state(topic).isr
    assert cluster.state("led").leader == 0
    lease = cluster.store.read_leases()[STOPPING]
    assert (lease.released, lease.broker_epoch) == (True, epoch)

    cluster.broker(STOPPING).start()

    restarted = cluster.store.read_leases()[STOPPING]
    assert (restarted.released, restarted.broker_epoch) == (False, epoch + 1)
    wait_for(lambda: _listed_by_survivors(cluster, kafka_ports) == {0, 1, 2}, "broker back")
    wait_for(lambda: cluster.state("alone").leader == STOPPING, "alone led again")
    wait_for(
        lambda: all(STOPPING in cluster.state(topic).isr for topic in ("led", "followed")),
        "broker back in every ISR",
    )


class _PartOneWaits(LocalStateStore):
    """A directory store that writes a batch's parts one at a time, as the Kubernetes
    store does, and whose write of a topic's second part waits for ``go``: the moment
    between two parts of a hand-over, held open."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.at_part_one = threading.Event()
        self.go = threading.Event()

    def _update_parts(self, topic: str, topic_id: str, changes: Mapping[int, PartChange]) -> None:
        # One part at a time, as a store that cannot write them together (Kubernetes).
        PartitionStateStore._update_parts(self, topic, topic_id, changes)

    def _update_part(self, topic: str, index: int, topic_id: str, change: PartChange) -> None:
        if index == 1:
            self.at_part_one.set()
            assert self.go.wait(timeout=30)
        super()._update_part(topic, index, topic_id, change)


def test_a_controlled_shutdown_applies_its_hand_over_once_every_part_is_written(
    tmp_path: Path,
) -> None:
    """Broker 0 leads partition 0 (in the topic's first part) and partition 1,000 (in
    its second) of a topic of two parts. While its hand-over waits between the two
    parts' writes, its replica manager, following the store every 100 ms, reads none
    of it: broker 0 still names itself leader of partition 0, whose new leader is
    already written. Once the second part is written it applies both. (At 4,000
    partitions its own pass over the first part took the GIL from the thread writing
    the others: docs/BENCHMARKS.md.)"""
    data = tmp_path / "data"
    data.mkdir()
    settings = ReplicationConfig(store=DirectoryStore(tmp_path / "state"))
    topics = TopicStore([data], LogConfig())
    broker = ReplicatedBroker(0, settings, topics)
    setup = LocalStateStore(tmp_path / "state")
    setup.acquire_lease(1, "broker-1", duration_s=SESSION_TIMEOUT_S)  # the one to take over
    led_here = (0, PARTITIONS_PER_PART)
    setup.create_topic(
        "orders",
        {
            p: PartitionState.new((0, 1) if p in led_here else (1,))
            for p in range(PARTITIONS_PER_PART + 1)
        },
    )
    store = broker.store = _PartOneWaits(tmp_path / "state")
    logs = LogManager(LogManagerConfig(log_dirs=(data,)))
    first, second = (TopicPartition("orders", p) for p in led_here)

    async def stop_between_parts() -> None:
        broker.broker_epoch = await broker.take_lease()
        replicas = broker.replicas = ReplicaManager(
            0, lambda: broker.broker_epoch, store, logs, topics, AppendWatch(),
            dict, _no_channel, [], settings,
        )  # fmt: skip
        await replicas.start()
        assert replicas.leadership(first).leader_id == 0
        shutdown = asyncio.create_task(broker.controlled_shutdown())
        assert await asyncio.to_thread(store.at_part_one.wait, 30)
        assert store.read_topic("orders")[0].leader == 1  # the first part is written
        await asyncio.sleep(5 * settings.state_poll_ms / 1000)  # polls came and went
        assert replicas.leadership(first).leader_id == 0
        store.go.set()
        await asyncio.wait_for(shutdown, timeout=30)
        assert replicas.leadership(first).leader_id == 1
        assert replicas.leadership(second).leader_id == 1
        assert not replicas.leaders
        await replicas.stop()
        broker.lease.stop()

    try:
        asyncio.run(stop_between_parts())
    finally:
        store.go.set()
        logs.shutdown()


def _no_channel(address: str) -> grpc.aio.Channel:
    raise AssertionError(f"broker 0 leads or follows nobody it must dial: {address}")
