"""Where the node keeps its state and which addresses it uses: one place for both.

The pods' bridge is the host's side of the cluster network: its gateway address is where
every component listens (the API server, the kubelet, CoreDNS), so pods reach them with
no Service in between, and nothing binds the host's other interfaces. The Service range
is a blackhole route (``host.py``): a ClusterIP that kube-proxy has not programmed yet is
dropped on the host instead of following the default route off the machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.tools.toolkit import REPO

__all__ = [
    "API_PORT",
    "BRIDGE",
    "CLUSTER_DOMAIN",
    "GATEWAY",
    "NODE_NAME",
    "POD_SUBNET",
    "SERVICE_RANGE",
    "Layout",
]

BRIDGE = "tierlog0"
POD_SUBNET = "10.244.0.0/24"
GATEWAY = "10.244.0.1"  # the bridge's own address: the node's IP
SERVICE_RANGE = "10.96.0.0/24"  # the API server's ClusterIP is its first address
API_PORT = 6443
NODE_NAME = "tierlog-node"
CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class Layout:
    """The node's directories and files under one state directory."""

    state: Path

    @classmethod
    def default(cls) -> Layout:
        return cls(REPO / ".cache" / "cluster")

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def pids(self) -> Path:
        return self.state / "pids"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def containerd_socket(self) -> Path:
        return self.state / "containerd" / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.state / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.state / "pod-logs"

    @property
    def cni_conf_dir(self) -> Path:
        return self.state / "cni" / "net.d"

    @property
    def local_volumes(self) -> Path:
        """Where the static local PersistentVolumes' directories are."""
        return self.state / "volumes"

    @property
    def saved_sysctls(self) -> Path:
        return self.state / "sysctls.json"

    def kubeconfig(self, user: str) -> Path:
        return self.pki / f"{user}.kubeconfig"

    def config(self, name: str) -> Path:
        return self.state / "config" / name
