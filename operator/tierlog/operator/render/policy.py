"""Disruption and network policy: at most one broker down at a time, and who may connect.

The PodDisruptionBudget stops voluntary evictions (node drains) from taking a second
broker while one is away; the operator's own rolling restarts keep to the same rule.
The NetworkPolicy, when asked for, admits the gRPC port and the Kafka port (each as
secure as the cluster asks: TLS, tokens) from the listed client pods, from the brokers
themselves and from the operator's pods (it drains brokers, asks them whether a restart
is safe and administers topics over gRPC: its namespace and pod labels come from its
configuration, which the chart sets), and the metrics port from anywhere in the cluster
(Prometheus lives in its own namespace, under names we cannot know).
"""

from __future__ import annotations

from typing import Any

from tierlog.operator.config import OperatorPeer
from tierlog.operator.render.common import (
    GRPC_PORT,
    KAFKA_PORT,
    METRICS_PORT,
    Manifest,
    Owner,
    metadata,
    selector_labels,
)
from tierlog.operator.spec import ClusterSpec

__all__ = ["NAMESPACE_NAME_LABEL", "network_policy", "pod_disruption_budget"]

# Every namespace carries its own name in this label (Kubernetes 1.21 and later).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def pod_disruption_budget(cluster: ClusterSpec, owner: Owner) -> Manifest:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(cluster, cluster.name, owner),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(cluster)},
        },
    }


def network_policy(cluster: ClusterSpec, owner: Owner, operator: OperatorPeer) -> Manifest:
    peers: list[dict[str, Any]] = [
        {"podSelector": {"matchLabels": selector_labels(cluster)}},
        {  # the operator's pods, in their namespace: both selectors in one peer entry
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: operator.namespace}},
            "podSelector": {"matchLabels": dict(operator.pod_labels)},
        },
    ]
    for selector in cluster.allowed_clients:
        # a selector of pods in any namespace: both selectors in one peer entry
        peers.append({"podSelector": dict(selector), "namespaceSelector": {}})
    client_ports = [{"port": GRPC_PORT, "protocol": "TCP"}, {"port": KAFKA_PORT, "protocol": "TCP"}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(cluster, cluster.name, owner),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(cluster)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": peers, "ports": client_ports},
                {"ports": [{"port": METRICS_PORT, "protocol": "TCP"}]},
            ],
        },
    }
