"""Consumer lag as the dashboards and TierlogConsumerLagHigh compute it, by a real
Prometheus over two real brokers: the group's coordinator reports its committed offsets,
each partition's owner its log end, and the join gives the lag a consumer would see.

The two brokers split the partitions by hash (``tierlog.cluster.brokers``), so one of
the topic's two partitions lives on the broker that does not coordinate the group: the
lag crosses brokers the way it does on a cluster, where no broker has both halves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.deploy.monitoring import DASHBOARDS, RULES, alerts, dashboard_queries, substitute
from tests.support.prometheus import PrometheusServer, ScrapeTarget, Series, start_prometheus
from tests.support.scrape import METRICS, metrics_address
from tests.support.sidecars import SidecarProcess, free_port, start_sidecar
from tierlog.client import Producer, TopicPartition
from tierlog.client.admin import AdminClient
from tierlog.client.cluster import Cluster
from tierlog.client.groups import GroupClient, OffsetAndMetadata

pytestmark = pytest.mark.slow

TOPIC = "orders"
ORDERS_0, ORDERS_1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
NAMESPACE, CLUSTER = "observed", "lagging"
# What Grafana puts in the cluster overview's variables ("All" is ".*").
VALUES = {"namespace": NAMESPACE, "cluster": CLUSTER, "consumergroup": ".*"}
OVERVIEW = next(path for path in DASHBOARDS if path.stem == "tierlog-cluster-overview")


def _panel(title: str) -> str:
    [expr] = [query.expr for query in dashboard_queries(OVERVIEW) if query.where == title]
    return substitute(expr, VALUES)


def _lag_alert_expr(threshold: int) -> str:
    [alert] = [alert for alert in alerts() if alert.name == "TierlogConsumerLagHigh"]
    assert alert.expr.rstrip().endswith(") > 10000")  # the threshold the chart replaces
    return alert.expr.rstrip().removesuffix("10000") + str(threshold)


def _by_partition(found: list[Series]) -> dict[tuple[str, str], float]:
    return {(s.labels["consumergroup"], s.labels["partition"]): s.value for s in found}


def _by_group(found: list[Series]) -> dict[tuple[str, str], float]:
    return {(s.labels["consumergroup"], s.labels["topic"]): s.value for s in found}


def _produce(addresses: list[str], counts: dict[TopicPartition, int]) -> None:
    with Producer({"bootstrap.servers": ",".join(addresses)}) as producer:
        sent = [
            producer.send(TOPIC, b"order %d" % i, partition=tp.partition)
            for tp, count in counts.items()
            for i in range(count)
        ]
        producer.flush()
        assert all(future.result(timeout=10) for future in sent)


def _eventually(
    prometheus: PrometheusServer,
    expr: str,
    wanted: object,
    convert: Callable[[list[Series]], object],
) -> None:
    """Until ``convert(query(expr)) == wanted``: the next scrapes carry a change."""
    deadline = time.monotonic() + 30
    while (found := convert(prometheus.query(expr))) != wanted:
        assert time.monotonic() < deadline, f"{expr}: {found}, not {wanted}"
        time.sleep(0.5)


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[SidecarProcess]]:
    ports = [free_port(), free_port()]
    cluster = ",".join(f"{node}@127.0.0.1:{port}" for node, port in enumerate(ports))
    started: list[SidecarProcess] = []
    try:
        for node, port in enumerate(ports):
            configs = (
                METRICS,
                "offsets.topic.num.partitions=1",
                f"node.id={node}",
                f"tierlog.cluster.brokers={cluster}",
            )
            started.append(start_sidecar(tmp_path / f"broker-{node}", *configs, port=port))
        with AdminClient(started[0].address) as admin:  # it tells both brokers
            admin.create_topic(TOPIC, 2)
        yield started
    finally:
        for broker in started:
            broker.stop()


@pytest.fixture
def prometheus(tmp_path: Path, brokers: list[SidecarProcess]) -> Iterator[PrometheusServer]:
    targets = [
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
        for node, broker in enumerate(brokers)
    ]
    with start_prometheus(tmp_path / "prometheus", targets, [RULES]) as server:
        server.wait_for_samples()
        yield server


def test_the_lag_is_each_partitions_end_less_the_groups_commit_across_brokers(
    brokers: list[SidecarProcess], prometheus: PrometheusServer
) -> None:
    addresses = [broker.address for broker in brokers]
    _produce(addresses, {ORDERS_0: 30, ORDERS_1: 12})
    cluster = Cluster(addresses)
    try:
        billing, audit = GroupClient(cluster, "billing"), GroupClient(cluster, "audit")
        billing.commit({ORDERS_0: OffsetAndMetadata(10), ORDERS_1: OffsetAndMetadata(12)})
        audit.commit({ORDERS_0: OffsetAndMetadata(30), ORDERS_1: OffsetAndMetadata(12)})

        by_partition = _panel("Consumer lag by partition")
        caught_up = {
            ("billing", "0"): 20,
            ("billing", "1"): 0,
            ("audit", "0"): 0,
            ("audit", "1"): 0,
        }
        _eventually(prometheus, by_partition, caught_up, _by_partition)
        # One broker coordinates both groups; each broker holds one of the partitions,
        # so one partition's lag joined the other broker's end with the coordinator's.
        committed = prometheus.query("tierlog_consumergroup_committed_offset")
        assert len({s.labels["pod"] for s in committed}) == 1
        owners = prometheus.query(f'tierlog_log_end_offset{{topic="{TOPIC}"}} > 0')
        assert sorted(s.labels["pod"] for s in owners) == [f"{CLUSTER}-0", f"{CLUSTER}-1"]

        by_group = _panel("Consumer lag by group")
        assert _by_group(prometheus.query(by_group)) == {
            ("billing", TOPIC): 20,
            ("audit", TOPIC): 0,
        }
        [largest] = prometheus.query(_panel("Largest consumer lag"))
        assert largest.value == 20
        assert _by_group(prometheus.query(_lag_alert_expr(15))) == {("billing", TOPIC): 20}
        assert prometheus.query(_lag_alert_expr(10000)) == []

        _produce(addresses, {ORDERS_0: 5})  # the end moves; the commits do not
        behind = {**caught_up, ("billing", "0"): 25, ("audit", "0"): 5}
        _eventually(prometheus, by_partition, behind, _by_partition)

        billing.delete()  # DeleteGroups: its series go, and its lag with them
        audit_only = {key: lag for key, lag in behind.items() if key[0] == "audit"}
        _eventually(prometheus, by_partition, audit_only, _by_partition)
    finally:
        cluster.close()
