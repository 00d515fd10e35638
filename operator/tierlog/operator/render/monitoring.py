"""A Prometheus Operator ServiceMonitor for the brokers' ``/metrics`` (when its CRD exists).

It selects the headless Service, whose endpoints list every broker, ready or not, so a
broker stuck in recovery is still scraped (its recovery progress is a metric). Each
target gets the label ``tierlog_cluster`` (the cluster's name), ``up`` included: two
clusters in one namespace are told apart by it, in the dashboards and the alerts. Not
``cluster``, which multi-cluster Prometheus setups (Thanos' and Mimir's external labels,
the Kubernetes mixins) keep for the Kubernetes cluster.
"""

from __future__ import annotations

from tierlog.operator.render.common import Manifest, Owner, labels, metadata
from tierlog.operator.render.services import SERVICE_LABEL
from tierlog.operator.spec import ClusterSpec

__all__ = ["CLUSTER_LABEL", "SERVICE_MONITOR_CRD", "service_monitor"]

SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
CLUSTER_LABEL = "tierlog_cluster"


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
                    "relabelings": [
                        {
                            "action": "replace",
                            "targetLabel": CLUSTER_LABEL,
                            "replacement": cluster.name,
                        }
                    ],
                }
            ],
        },
    }
