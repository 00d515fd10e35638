"""A real Prometheus scrapes three replicating brokers: the overview's replication row and
the replication alerts find their series, and a dead broker shows on them.

The brokers are labelled as a ServiceMonitor labels pods (``namespace``, ``pod``,
``tierlog_cluster``...), the rule file is loaded, and the dashboards' variables are
replaced as Grafana would (tests/support/dashboards.py). The rest of the dashboards and
rules is checked against brokers without replication (tests/deploy/test_observability.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.monitoring import (
    DASHBOARDS,
    REPLICATION_GROUP,
    RULES,
    alerts,
    dashboard_queries,
    metric_selectors,
    substitute,
)
from tests.support.dashboards import assert_every_dashboard_query_has_data, of_replication
from tests.support.prometheus import PrometheusServer, ScrapeTarget, start_prometheus
from tests.support.scrape import METRICS, metrics_address
from tierlog.client import Consumer, OffsetAndMetadata, Producer, TopicPartition

from .conftest import Cluster, ClusterFactory, wait_for

pytestmark = pytest.mark.slow

NAMESPACE, CLUSTER = "replicated", "orders-cluster"
VALUES = {"namespace": NAMESPACE, "cluster": CLUSTER}
OVERVIEW = [path for path in DASHBOARDS if path.stem == "tierlog-cluster-overview"]


def _targets(cluster: Cluster) -> list[ScrapeTarget]:
    return [
        ScrapeTarget(
            "tierlog-brokers",
            metrics_address(broker.output),
            {
                "namespace": NAMESPACE,
                "pod": f"{CLUSTER}-{node}",
                "service": f"{CLUSTER}-brokers",
                "endpoint": "metrics",
                "tierlog_cluster": CLUSTER,
            },
        )
        for node, broker in enumerate(cluster.brokers)
    ]


@pytest.fixture
def watched(
    replicated_brokers: ClusterFactory, tmp_path: Path
) -> Iterator[tuple[Cluster, PrometheusServer]]:
    """Three brokers with ``orders`` on all of them (produced to, so every follower has
    fetched) and ``solo`` on broker 0 alone, scraped a few times."""
    cluster = replicated_brokers(
        3, METRICS, "broker.session.timeout.ms=1500", "replica.lag.time.max.ms=1500"
    )
    cluster.create_topic("orders", (0, 1, 2))
    cluster.create_topic("solo", (0,))
    with Producer({"bootstrap.servers": cluster.servers, "acks": "all"}) as producer:
        sent = [producer.send("orders", b"order %d" % i, partition=0) for i in range(20)]
        producer.flush()
        assert all(future.result(timeout=10) for future in sent)
    with start_prometheus(tmp_path / "prometheus", _targets(cluster), [RULES]) as prometheus:
        prometheus.wait_for_samples()
        yield cluster, prometheus


def test_every_replication_query_and_alert_finds_series(
    watched: tuple[Cluster, PrometheusServer],
) -> None:
    cluster, prometheus = watched
    assert len(list(filter(of_replication, dashboard_queries(OVERVIEW[0])))) >= 10
    replication_alerts = [alert for alert in alerts() if alert.group == REPLICATION_GROUP]
    assert {alert.name for alert in replication_alerts} == {
        "TierlogUnderReplicatedPartitions",
        "TierlogUnderMinIsrPartitions",
        "TierlogOfflinePartitions",
    }
    for alert in replication_alerts:
        assert not prometheus.query(alert.expr), f"{alert.name} fires on a healthy cluster"
        for selector in metric_selectors(alert.expr):
            assert prometheus.query(selector), f"{alert.name}: no series for {selector}"
    assert _panel_value(prometheus, "Brokers replicating") == 3
    assert _panel_value(prometheus, "Partitions led") == 2
    # Last, a group's commit (it makes __consumer_offsets, 50 more partitions), so the
    # overview's consumergroup variable has a value here too.
    with Consumer({"bootstrap.servers": cluster.servers, "group.id": "billing"}) as consumer:
        consumer.commit({TopicPartition("orders", 0): OffsetAndMetadata(20)})
    wait_for(
        lambda: bool(prometheus.query("tierlog_consumergroup_members")),
        "Prometheus to scrape the group's series",
    )
    assert_every_dashboard_query_has_data(prometheus.url, VALUES, OVERVIEW, of_replication)


def test_a_dead_broker_shows_as_offline_and_under_replicated_partitions(
    watched: tuple[Cluster, PrometheusServer],
) -> None:
    """Broker 0 is killed: ``solo`` has nobody left to lead it, ``orders`` is led by a
    follower with the two live brokers in its ISR; the panels say so and the alerts on
    them are pending (their ``for`` is longer than this test)."""
    cluster, prometheus = watched
    cluster.broker(0).kill()
    wait_for(
        lambda: (
            _panel_value(prometheus, "Offline partitions") == 1
            and _panel_value(prometheus, "Under-replicated partitions") == 1
            and _elections(prometheus).get("leader_fenced", 0) >= 1
        ),
        "Prometheus to see solo-0 offline, and orders-0 under-replicated under a new leader",
    )
    assert set(cluster.state("orders").isr) == {1, 2}
    pending = _until_pending(
        prometheus, "TierlogOfflinePartitions", "TierlogUnderReplicatedPartitions"
    )
    assert [
        alert["labels"]["tierlog_cluster"] for alert in pending["TierlogOfflinePartitions"]
    ] == [CLUSTER]
    leader = cluster.state("orders").leader
    assert [alert["labels"]["pod"] for alert in pending["TierlogUnderReplicatedPartitions"]] == [
        f"{CLUSTER}-{leader}"
    ]


def _panel_query(title: str) -> str:
    [expr] = [query.expr for query in dashboard_queries(OVERVIEW[0]) if query.where == title]
    # Over all Prometheus saw: the election happened within this test.
    return substitute(expr, {**VALUES, "__rate_interval": "10m"})


def _elections(prometheus: PrometheusServer) -> dict[str, float]:
    found = prometheus.query(_panel_query("Leader elections by cause"))
    return {series.labels["cause"]: series.value for series in found}


def _panel_value(prometheus: PrometheusServer, title: str) -> float:
    found = prometheus.query(_panel_query(title))
    return found[0].value if found else -1


def _until_pending(prometheus: PrometheusServer, *names: str) -> dict[str, list[Any]]:
    """The alerts of the rules ``names`` once every one of them is pending."""
    deadline = time.monotonic() + 30
    while True:
        rules = {rule["name"]: rule for rule in prometheus.rules()}
        if all(rules[name]["state"] == "pending" for name in names):
            return {name: rules[name]["alerts"] for name in names}
        assert time.monotonic() < deadline, {name: rules[name]["state"] for name in names}
        time.sleep(0.2)
