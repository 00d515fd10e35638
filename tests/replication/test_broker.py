"""A broker's clean stop ends by giving its lease up (``ReplicatedBroker.stop``): real
brokers, three, whose leases last 30 s, so nothing here can be a lease running out.

Kafka's controller fences a broker as soon as its controlled shutdown completes: it
drops out of Metadata and out of the ISRs it could not leave. A tierlog broker's lease
went on counting until it expired, and the survivors listed it to clients meanwhile
(kafka-python sent it requests).
"""

from __future__ import annotations

import signal
import time

from tests.kafka.test_cluster import _metadata_broker_ids
from tests.support.sidecars import free_port
from tierlog.partition_state.model import NO_LEADER

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
