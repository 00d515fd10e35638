"""Objects every ``up`` applies: CoreDNS's read access and the node's local volumes.

Storage: static ``local`` PersistentVolumes, each a directory under the node's state, in
a default StorageClass that binds on first use (``WaitForFirstConsumer``). The kubelet
gives a local volume to the pod's ``fsGroup``, so the brokers (uid 10001) can write to it;
kube-controller-manager's built-in hostPath provisioner cannot serve them (it makes
root-owned 0750 directories under /tmp). A volume whose claim was deleted is left
``Released`` by Kubernetes; the next ``up`` (or an e2e test deleting its namespace)
wipes and frees it (``node.free_released_volumes``).
"""

from __future__ import annotations

from typing import Any

from tests.support.cluster.layout import NODE_NAME, Layout
from tests.support.cluster.pki import USERS

__all__ = ["STORAGE_CLASS", "VOLUME_COUNT", "coredns_access", "local_volumes"]

STORAGE_CLASS = "local"
VOLUME_COUNT = 8  # a 3-broker cluster twice over, and a StatefulSet of a test or two
VOLUME_SIZE = "20Gi"  # nominal: a directory on the host's disk


def coredns_access() -> list[dict[str, Any]]:
    """What CoreDNS's ``kubernetes`` plugin lists and watches, bound to its user."""
    user = USERS["coredns"][0]
    name = "tierlog:coredns"
    role: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["services", "pods", "namespaces"],
                "verbs": ["list", "watch"],
            },
            {
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["list", "watch"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": name,
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    return [role, binding]


def volume_name(index: int) -> str:
    return f"{STORAGE_CLASS}-{index}"


def local_volumes(layout: Layout) -> list[dict[str, Any]]:
    """The default StorageClass and ``VOLUME_COUNT`` PersistentVolumes on this node."""
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Retain",
    }
    node_affinity = {
        "required": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE_NAME]}
                    ]
                }
            ]
        }
    }
    volumes = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume_name(index)},
            "spec": {
                "capacity": {"storage": VOLUME_SIZE},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": STORAGE_CLASS,
                "local": {"path": str(layout.local_volumes / volume_name(index))},
                "nodeAffinity": node_affinity,
            },
        }
        for index in range(VOLUME_COUNT)
    ]
    return [storage_class, *volumes]
