"""What a replicated cluster's brokers may do in the API server: their partition state.

With ``spec.replication`` the brokers keep the partition-state store of
``tierlog.partition_state.kube_store``: the ConfigMaps ``NAME-partition-state`` and
``NAME-topic-configs`` and one Lease per broker, ``NAME-broker-ID``. Their Role grants
exactly that. Reading and replacing are granted by name; creating cannot be (the API
server authorizes a create before the object has a name), nor can the list of leases by
label the store reads. The brokers run as ``spec.serviceAccountName`` when set, else as
a ServiceAccount of their own, ``NAME-broker``, so no other pod of the namespace gets
these rights.
"""

from __future__ import annotations

from tierlog.operator.render.common import Manifest, Owner, metadata
from tierlog.operator.spec import ClusterSpec
from tierlog.partition_state.kube_store import (
    lease_name,
    state_config_map_name,
    topic_configs_map_name,
)

__all__ = [
    "broker_service_account",
    "broker_service_account_name",
    "partition_state_role",
    "partition_state_role_binding",
]


def broker_service_account_name(cluster: ClusterSpec) -> str:
    """The broker pods' ServiceAccount ("": the namespace's default)."""
    if cluster.service_account_name or cluster.replication is None:
        return cluster.service_account_name
    return f"{cluster.name}-broker"


def broker_service_account(cluster: ClusterSpec, owner: Owner) -> Manifest | None:
    """The brokers' own ServiceAccount, when the operator names it (None: the user's)."""
    if cluster.service_account_name or cluster.replication is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(cluster, broker_service_account_name(cluster), owner),
    }


def _role_name(cluster: ClusterSpec) -> str:
    return f"{cluster.name}-partition-state"


def partition_state_role(cluster: ClusterSpec, owner: Owner, brokers: int) -> Manifest:
    """``brokers``: how many broker pods there may be (during a scale-down, or one that is
    refused, the leaving ones still run and keep their Leases)."""
    leases = [lease_name(cluster.name, broker) for broker in range(brokers)]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(cluster, _role_name(cluster), owner),
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [
                    state_config_map_name(cluster.name),
                    topic_configs_map_name(cluster.name),
                ],
                "verbs": ["get", "update"],
            },
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["create", "list"],
            },
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": leases,
                "verbs": ["get", "update"],
            },
        ],
    }


def partition_state_role_binding(cluster: ClusterSpec, owner: Owner) -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(cluster, _role_name(cluster), owner),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": _role_name(cluster),
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": broker_service_account_name(cluster),
                "namespace": cluster.namespace,
            }
        ],
    }
