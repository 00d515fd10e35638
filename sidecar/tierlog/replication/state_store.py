"""The partition-state store a broker's config names, opened.

A directory on one machine, or the API server on Kubernetes: there the broker reaches
it with its pod's service account (``KubeConfig.from_env`` reads the mounted token, and
``$KUBECONFIG`` or ``~/.kube/config`` outside a pod), which the operator's Role lets
read and write its namespace's ConfigMaps and its cluster's Leases only.
"""

from __future__ import annotations

from lightkube import Client, KubeConfig

from tierlog.partition_state.kube_store import KubeStateStore
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.store import PartitionStateStore
from tierlog.replication.config import DirectoryStore, KubernetesStore, StoreLocation

__all__ = ["open_state_store"]


def open_state_store(location: StoreLocation) -> PartitionStateStore:
    match location:
        case DirectoryStore(directory):
            return LocalStateStore(directory)
        case KubernetesStore(namespace, cluster):
            client = Client(KubeConfig.from_env(), field_manager="tierlog-sidecar")
            store = KubeStateStore(client, namespace, cluster)
            store.adopt_single_config_maps()  # a broker may start before the operator's upgrade
            return store
