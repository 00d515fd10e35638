"""The operator's Prometheus metrics: its passes, failures and how long they take, how
many brokers each cluster's spec asks for, and what the controller it runs for each
replicated cluster did (the brokers' ``tierlog_controller_*`` series: on Kubernetes the
operator's controller decides, so the brokers report 0 and these the truth).

``tierlog_cluster_brokers_desired`` is what an alert compares the brokers Prometheus
scrapes with, so a broker whose target vanished (no ``up`` series left to be 0) is
missed too. Its ``namespace`` is the cluster's, not the operator's: the operator's
ServiceMonitor honours the labels it exports (as kube-state-metrics' does), and
``tierlog_cluster`` is the label the brokers' ServiceMonitor gives their targets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tierlog.controller.controller import Controller

__all__ = ["ControllerCollector", "OperatorMetrics"]


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.reconciliations = Counter(
            "tierlog_operator_reconciliations_total",
            "Reconciliation passes, by kind of object",
            ["kind"],
            registry=self.registry,
        )
        self.failures = Counter(
            "tierlog_operator_reconcile_failures_total",
            "Reconciliation passes that failed (and will be retried), by kind of object",
            ["kind"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "tierlog_operator_reconcile_duration_seconds",
            "How long a reconciliation pass took, by kind of object",
            ["kind"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.brokers_desired = Gauge(
            "tierlog_cluster_brokers_desired",
            "Brokers a TierlogCluster's spec asks for, by its namespace and name",
            ["namespace", "tierlog_cluster"],
            registry=self.registry,
        )

        # (namespace, name) -> the controller this replica runs for that cluster.
        self.controllers: dict[tuple[str, str], Controller] = {}
        self.registry.register(ControllerCollector(self.controllers))

    def cluster_brokers(self, namespace: str, name: str, brokers: int) -> None:
        self.brokers_desired.labels(namespace, name).set(brokers)

    def cluster_deleted(self, namespace: str, name: str) -> None:
        """No brokers expected of a deleted cluster: its series goes."""
        with suppress(KeyError):  # never reconciled by this replica
            self.brokers_desired.remove(namespace, name)

    @contextmanager
    def timed(self, kind: str) -> Iterator[None]:
        """Count and time one pass; a pass that raises counts as a failure."""
        started = time.monotonic()
        self.reconciliations.labels(kind).inc()
        try:
            yield
        except BaseException:
            self.failures.labels(kind).inc()
            raise
        finally:
            self.duration.labels(kind).observe(time.monotonic() - started)

    def serve(self, port: int, address: str = "0.0.0.0") -> None:
        start_http_server(port, address, registry=self.registry)


class ControllerCollector(Collector):
    """The controllers' series, read at scrape time, labelled by their cluster."""

    def __init__(self, controllers: Mapping[tuple[str, str], Controller]):
        self.controllers = controllers

    def collect(self) -> Iterator[Metric]:
        labels = ["namespace", "tierlog_cluster"]
        offline = GaugeMetricFamily(
            "tierlog_controller_offline_partitions",
            "Partitions without a leader at the controller's last pass (Kafka's "
            "OfflinePartitionsCount), by cluster",
            labels=labels,
        )
        elections = CounterMetricFamily(
            "tierlog_controller_leader_elections_total",
            "Leaders the operator's controller elected, by cluster and cause",
            labels=[*labels, "cause"],
        )
        for (namespace, name), controller in sorted(dict(self.controllers).items()):
            offline.add_metric([namespace, name], controller.offline_partitions)
            for cause, count in sorted(dict(controller.elections).items()):
                elections.add_metric([namespace, name, cause], count)
        yield offline
        yield elections
