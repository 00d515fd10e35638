"""Replication's series on real brokers (tierlog.replication.metrics), scraped over HTTP:
leaderships, the ISR as the leader sees it, followers' lag, and the controller's counts.

Followers are stopped with SIGSTOP and killed with SIGKILL; each step waits for the
series to say what the store already says (the leader applies a stored ISR change a
moment after the store has it).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from tests.sidecar.conftest import Sidecar, start_sidecar
from tests.support.prometheus import SERVICE_MONITOR_TARGET_LABELS
from tests.support.scrape import METRICS, Scrape, scrape_sidecar
from tierlog.api.v1 import log_service_pb2
from tierlog.storage.records import SimpleRecord, build_batch

from .conftest import Cluster, ClusterFactory, wait_for

TOPIC = "orders"
# Every series a broker with replication reports (docs/METRICS.md, "Replication").
REPLICATION_SERIES = {
    "tierlog_leader_partitions",
    "tierlog_replica_partitions",
    "tierlog_under_replicated_partitions",
    "tierlog_under_min_isr_partitions",
    "tierlog_at_min_isr_partitions",
    "tierlog_isr_shrinks_total",
    "tierlog_isr_expands_total",
    "tierlog_unclean_recoveries_total",
    "tierlog_follower_max_lag_records",
    "tierlog_controller_offline_partitions",
    "tierlog_controller_leader_elections_total",
}


def _produce(broker: Sidecar, value: bytes, acks: log_service_pb2.Acks.ValueType) -> None:
    batch = build_batch([SimpleRecord(None, value, int(time.time() * 1000), ())])
    broker.log.Produce(
        log_service_pb2.ProduceRequest(topic=TOPIC, record_batches=batch, acks=acks), timeout=20
    )


def _until(broker: Sidecar, condition: Callable[[Scrape], bool], what: str) -> Scrape:
    """The first scrape of ``broker`` for which ``condition`` holds."""
    scraped: list[Scrape] = []

    def holds() -> bool:
        scraped[:] = [scrape_sidecar(broker)]
        return condition(scraped[0])

    wait_for(holds, f"{broker.data_dir.name}: {what}")
    return scraped[0]


def _lag(scraped: Scrape, follower: int) -> float:
    return scraped.value("tierlog_follower_max_lag_records", follower=str(follower))


def _isr_series(scraped: Scrape) -> tuple[float, ...]:
    return tuple(
        scraped.value(name)
        for name in (
            "tierlog_under_replicated_partitions",
            "tierlog_under_min_isr_partitions",
            "tierlog_at_min_isr_partitions",
            "tierlog_isr_shrinks_total",
            "tierlog_isr_expands_total",
        )
    )


def _total(cluster: Cluster, name: str, alive: tuple[int, ...], **labels: str) -> float:
    return sum(scrape_sidecar(cluster.broker(node)).value(name, **labels) for node in alive)


def _most(cluster: Cluster, name: str, alive: tuple[int, ...]) -> float:
    """The largest of the brokers' values (every broker's controller reports its view)."""
    return max(scrape_sidecar(cluster.broker(node)).value(name) for node in alive)


def test_the_leader_reports_its_isr_changes_and_each_followers_lag(
    replicated_brokers: ClusterFactory,
) -> None:
    # The leader alone changes the ISR here: no lease expires while a follower is stopped.
    cluster = replicated_brokers(
        3,
        METRICS,
        "replica.lag.time.max.ms=1500",
        "broker.session.timeout.ms=60000",
        "min.insync.replicas=2",
    )
    cluster.create_topic(TOPIC, (0, 1, 2))
    leader = cluster.broker(0)
    wait_for(lambda: scrape_sidecar(leader).value("tierlog_leader_partitions") == 1, "a leader")
    _produce(leader, b"a", log_service_pb2.ACKS_ALL)  # both followers fetched from offset 1

    for node in (0, 1, 2):
        scraped = scrape_sidecar(cluster.broker(node))
        assert scraped.names() >= REPLICATION_SERIES - {"tierlog_follower_max_lag_records"}
        assert scraped.value("tierlog_leader_partitions") == (node == 0)
        assert scraped.value("tierlog_replica_partitions") == 1
        assert _isr_series(scraped) == (0, 0, 0, 0, 0)
    scraped = scrape_sidecar(leader)
    assert (_lag(scraped, 1), _lag(scraped, 2)) == (0, 0)
    own_labels = {
        label
        for (name, labels) in scraped.samples
        if name in REPLICATION_SERIES
        for label, _ in labels
    }
    assert own_labels == {"follower", "cause"}  # none a ServiceMonitor's target sets
    assert not own_labels & SERVICE_MONITOR_TARGET_LABELS
    assert not scrape_sidecar(cluster.broker(1)).labelled("tierlog_follower_max_lag_records")

    follower_1, follower_2 = cluster.broker(1).process.pid, cluster.broker(2).process.pid
    os.kill(follower_2, signal.SIGSTOP)
    try:
        for value in (b"b", b"c"):
            _produce(leader, value, log_service_pb2.ACKS_LEADER)
        # Broker 2 is two records behind and leaves the ISR; two in sync is the minimum.
        scraped = _until(
            leader,
            lambda s: _isr_series(s) == (1, 0, 1, 1, 0) and _lag(s, 1) == 0,
            "broker 2 out of the ISR",
        )
        assert _lag(scraped, 2) == 2
        os.kill(follower_1, signal.SIGSTOP)
        try:
            _produce(leader, b"d", log_service_pb2.ACKS_LEADER)
            scraped = _until(
                leader, lambda s: _isr_series(s) == (1, 1, 0, 2, 0), "the leader alone in the ISR"
            )
            assert (_lag(scraped, 1), _lag(scraped, 2)) == (1, 3)
        finally:
            os.kill(follower_1, signal.SIGCONT)
        _until(leader, lambda s: _isr_series(s) == (1, 0, 1, 2, 1), "broker 1 back in the ISR")
    finally:
        os.kill(follower_2, signal.SIGCONT)
    scraped = _until(leader, lambda s: _isr_series(s) == (0, 0, 0, 2, 2), "the whole ISR back")
    assert (_lag(scraped, 1), _lag(scraped, 2)) == (0, 0)
    assert cluster.state(TOPIC).isr == (0, 1, 2)


def test_the_controller_reports_offline_partitions_and_elections_by_cause(
    replicated_brokers: ClusterFactory,
) -> None:
    """Every broker runs a controller: the brokers' sums of elections are the cluster's
    (each change lands once), their offline counts agree. A leader counts the ISR shrink
    the controller makes when it fences a follower (a lag time this long leaves no leader
    time to make it first)."""
    cluster = replicated_brokers(
        3, METRICS, "broker.session.timeout.ms=1500", "replica.lag.time.max.ms=60000"
    )
    cluster.create_topic(TOPIC, (0, 1, 2))
    cluster.create_topic("solo", (0,))  # one replica: offline while broker 0 is down
    cluster.create_topic("followed", (1, 0))  # led by broker 1, followed by broker 0
    for node in (0, 1, 2):
        scraped = scrape_sidecar(cluster.broker(node))
        assert scraped.value("tierlog_controller_offline_partitions") == 0
        assert sum(scraped.labelled("tierlog_controller_leader_elections_total").values()) == 0

    cluster.broker(0).kill()
    alive = (1, 2)

    def elections(cause: str, brokers: tuple[int, ...] = alive) -> float:
        return _total(cluster, "tierlog_controller_leader_elections_total", brokers, cause=cause)

    wait_for(
        lambda: (
            _most(cluster, "tierlog_controller_offline_partitions", alive) == 1
            and elections("leader_fenced") == 1
        ),
        "solo-0 offline and orders-0 led by another broker",
    )
    assert cluster.state(TOPIC).leader in alive
    wait_for(
        lambda: scrape_sidecar(cluster.broker(1)).value("tierlog_isr_shrinks_total") == 1,
        "broker 1 to count followed-0's ISR shrink",
    )
    assert cluster.state("followed").isr == (1,)

    cluster.broker(0).start()  # solo-0 is back; orders-0 goes back to its first replica
    everyone = (0, 1, 2)
    wait_for(
        lambda: (
            _most(cluster, "tierlog_controller_offline_partitions", everyone) == 0
            and elections("offline_recovered", everyone) == 1
            and elections("preferred", everyone) == 1
        ),
        "solo-0 back and broker 0 leading orders-0 again",
    )
    assert cluster.state(TOPIC).leader == 0
    assert (elections("leader_fenced", everyone), elections("unclean", everyone)) == (1, 0)
    # Broker 0 rejoined followed-0's ISR and orders-0's (before it led again): two
    # expansions, by broker 1 and orders-0's interim leader; one shrink in all.
    wait_for(
        lambda: _total(cluster, "tierlog_isr_expands_total", everyone) == 2,
        "broker 0 back in both ISRs",
    )
    assert _total(cluster, "tierlog_isr_shrinks_total", everyone) == 1
    assert cluster.state("followed").isr == (1, 0)


def test_a_broker_without_replication_reports_none_of_it(tmp_path: Path) -> None:
    """No ISR, no followers, no controller: no series, rather than zeros that would read
    as a healthy replicated broker."""
    sidecar = start_sidecar(tmp_path / "data", METRICS)
    try:
        sidecar.create_topic(TOPIC)
        scraped = scrape_sidecar(sidecar)
        assert scraped.value("tierlog_partitions") == 1
        assert not scraped.names() & REPLICATION_SERIES
    finally:
        sidecar.stop()
