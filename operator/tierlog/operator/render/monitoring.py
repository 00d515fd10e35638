"""A Prometheus Operator ServiceMonitor for the brokers' ``/metrics`` (when its CRD exists).

It selects the headless Service, whose endpoints list every broker, ready or not, so a
broker stuck in recovery is still scraped (its recovery progress is a metric).
"""

from __future__ import annotations

from tierlog.operator.render.common import Manifest, Owner, labels, metadata
from tierlog.operator.render.services import SERVICE_LABEL
from tierlog.operator.spec import ClusterSpec

__all__ = ["SERVICE_MONITOR_CRD", "service_monitor"]

SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"


def service_monitor(cluster: ClusterSpec, owner: Owner) -> Manifest:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(cluster, cluster.name, owner, cluster.service_monitor_labels),
        "spec": {
            "selector": {"matchLabels": {**labels(cluster), SERVICE_LABEL: "brokers"}},
            "namespaceSelector": {"matchNames": [cluster.namespace]},
            "endpoints": [
                {
                    "port": "metrics",
                    "path": "/metrics",
                    "interval": cluster.service_monitor_interval,
                }
            ],
        },
    }
