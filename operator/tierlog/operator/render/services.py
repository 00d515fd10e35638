"""The cluster's Services: a headless one for per-broker addresses, one for clients.

Clients bootstrap from ``<cluster>.<namespace>.svc:9092`` (any ready broker answers
Metadata) and then dial each partition's owner at its stable per-pod name under the
headless Service; Kafka clients do the same on port ``kafka`` (19092).
The headless Service publishes addresses of brokers that are not ready yet, so a
broker's name resolves while it recovers and its peers can point clients at it.
"""

from __future__ import annotations

from tierlog.operator.render.common import (
    GRPC_PORT,
    KAFKA_PORT,
    METRICS_PORT,
    Manifest,
    Owner,
    headless_service_name,
    metadata,
    selector_labels,
)
from tierlog.operator.spec import ClusterSpec

__all__ = ["SERVICE_LABEL", "client_service", "headless_service"]

# Tells the two Services apart (the ServiceMonitor scrapes through the headless one).
SERVICE_LABEL = "tierlog.io/service"

_PORTS = [
    {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
    {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
    {"name": "kafka", "port": KAFKA_PORT, "targetPort": "kafka", "protocol": "TCP"},
]


def headless_service(cluster: ClusterSpec, owner: Owner) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(
            cluster, headless_service_name(cluster), owner, {SERVICE_LABEL: "brokers"}
        ),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(cluster),
            "ports": _PORTS,
        },
    }


def client_service(cluster: ClusterSpec, owner: Owner) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(cluster, cluster.name, owner, {SERVICE_LABEL: "clients"}),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(cluster),
            "ports": _PORTS,
        },
    }
