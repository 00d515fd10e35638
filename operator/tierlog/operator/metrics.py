"""The operator's own Prometheus metrics: passes, failures and how long they take."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

__all__ = ["OperatorMetrics"]


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
