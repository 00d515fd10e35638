"""What every rendered object of a cluster shares: names, labels, ports, the owner.

Each renderer is a pure function from a ``ClusterSpec`` (and what else it needs) to
one manifest as a plain dict, ready for server-side apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.operator.crds import CLUSTER_KIND, GROUP, VERSION
from tierlog.operator.spec import ClusterSpec

__all__ = [
    "CONFIG_HASH_ANNOTATION",
    "GRPC_PORT",
    "KAFKA_PORT",
    "METRICS_PORT",
    "Manifest",
    "Owner",
    "broker_address",
    "broker_host",
    "broker_kafka_address",
    "config_map_name",
    "headless_service_name",
    "kafka_security_protocol",
    "labels",
    "metadata",
    "selector_labels",
]

Manifest = dict[str, Any]

GRPC_PORT = 9092
KAFKA_PORT = 19092  # Kafka's wire protocol (9092, Kafka's own, is gRPC's here)
METRICS_PORT = 9404
# On the pod template: the hash of the configuration the pod was started with.
CONFIG_HASH_ANNOTATION = "tierlog.io/config-hash"


class Owner:
    """The custom resource, as an owner reference (its uid comes from the server)."""

    def __init__(self, name: str, uid: str):
        self.name, self.uid = name, uid

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": CLUSTER_KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def selector_labels(cluster: ClusterSpec) -> dict[str, str]:
    """The labels that select the cluster's broker pods (never change: selectors are fixed)."""
    return {
        "app.kubernetes.io/name": "tierlog",
        "app.kubernetes.io/instance": cluster.name,
        "app.kubernetes.io/component": "broker",
    }


def labels(cluster: ClusterSpec) -> dict[str, str]:
    return {
        **selector_labels(cluster),
        "app.kubernetes.io/part-of": "tierlog",
        "app.kubernetes.io/managed-by": "tierlog-operator",
    }


def metadata(
    cluster: ClusterSpec, name: str, owner: Owner, extra_labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": cluster.namespace,
        "labels": {**labels(cluster), **(extra_labels or {})},
        "ownerReferences": [owner.reference()],
    }


def headless_service_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-brokers"


def config_map_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-config"


def broker_host(cluster: ClusterSpec, broker_id: int) -> str:
    """The broker's stable DNS name (the headless Service's per-pod record)."""
    service = headless_service_name(cluster)
    return f"{cluster.name}-{broker_id}.{service}.{cluster.namespace}.svc"


def broker_address(cluster: ClusterSpec, broker_id: int) -> str:
    return f"{broker_host(cluster, broker_id)}:{GRPC_PORT}"


def broker_kafka_address(cluster: ClusterSpec, broker_id: int) -> str:
    return f"{broker_host(cluster, broker_id)}:{KAFKA_PORT}"


def kafka_security_protocol(cluster: ClusterSpec) -> str:
    """The Kafka listener's security protocol, from the cluster's gRPC security: TLS
    with ``spec.tls`` (the same certificate), SASL with ``spec.authentication`` (PLAIN
    and OAUTHBEARER check the same token; SCRAM the users' credentials that a holder of
    the token sets), so the Kafka port is never a way around
    either. The protocol's name is also the listener's, in ``listeners`` and
    ``advertised.listeners`` alike (Kafka's default ``listener.security.protocol.map``)."""
    sasl = "SASL_" if cluster.token is not None else ""
    if cluster.tls is not None:
        return f"{sasl}SSL"
    return f"{sasl}PLAINTEXT"
