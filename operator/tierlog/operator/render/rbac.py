"""What a replicated cluster's brokers may do in the API server: their partition state.

With ``spec.replication`` the brokers keep the partition-state store of
``tierlog.partition_state.kube_store``: a ConfigMap per part of each topic's partitions
and one for its config overrides (named after the topic, so not known when the Role is
made), the ``NAME-partition-state`` and ``NAME-topic-configs`` that held every topic
before parts (emptied once adopted) and one Lease per broker, ``NAME-broker-ID``. The
topics' ConfigMaps cannot be granted by name: the brokers may read, list, create,
watch, replace and delete the namespace's ConfigMaps, a reason to give a cluster a
namespace of its own (each broker follows its partition state by a watch, and falls
back to reading all of it at every poll when refused). The Leases are granted
by name, but for their create and list (the API server authorizes a create before the
object has a name, and a list is by label). The brokers run as
``spec.serviceAccountName`` when set, else as a ServiceAccount of their own,
``NAME-broker``, so no other pod of the namespace gets these rights.

Users' SCRAM credentials (derived keys, enough to impersonate the server) are the
Secret ``NAME-scram-credentials``, which the brokers may get and update by name and
nothing else of the namespace's Secrets. They may not create it: RBAC cannot limit a
create by name, and a broker free to create Secrets could create one of type
``kubernetes.io/service-account-token`` under that very name and read a token of any
ServiceAccount of the namespace out of it. The operator creates it empty instead, and
its type (Opaque) cannot change on update. The operator applies it without ``data``,
so its passes never touch the credentials the brokers write.
"""

from __future__ import annotations

from tierlog.operator.render.common import Manifest, Owner, labels, metadata
from tierlog.operator.spec import ClusterSpec
from tierlog.partition_state.kube_store import (
    CLUSTER_LABEL,
    lease_name,
    scram_credentials_secret_name,
)

__all__ = [
    "broker_service_account",
    "broker_service_account_name",
    "partition_state_role",
    "partition_state_role_binding",
    "scram_credentials_secret",
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
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["get", "list", "watch", "create", "update", "delete"],
            },
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": [scram_credentials_secret_name(cluster.name)],
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


def scram_credentials_secret(cluster: ClusterSpec) -> Manifest:
    """The empty Secret the brokers keep users' SCRAM credentials in; no ``data``, so
    applying it again leaves theirs. Like the partition state, no owner reference: the
    users outlive a deleted cluster, for one made again under its name."""
    name = scram_credentials_secret_name(cluster.name)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace,
            "labels": {**labels(cluster), CLUSTER_LABEL: cluster.name},
        },
        "type": "Opaque",
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
