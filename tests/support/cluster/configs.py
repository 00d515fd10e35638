"""The configuration files of containerd, the CNI bridge, the kubelet, kube-proxy and CoreDNS.

Each is a function of the ``Layout`` and the network constants, written by ``node.py``
before the daemon that reads it starts. The choices that this machine forces are said
where they are made; ``docs/KUBERNETES.md`` has the whole story.
"""

from __future__ import annotations

import json

from tests.support.cluster.layout import (
    BRIDGE,
    CLUSTER_DOMAIN,
    GATEWAY,
    POD_SUBNET,
    Layout,
)
from tests.tools.kube_node import PAUSE_VERSION
from tests.tools.node_packages import CNI_BIN_DIR

__all__ = [
    "PAUSE_IMAGE",
    "cni_conflist",
    "containerd_config",
    "corefile",
    "kube_proxy_config",
    "kubelet_config",
]

# Built here from the release's pause.c (images.py): the kubelet never pulls it.
PAUSE_IMAGE = f"localhost/tierlog/pause:{PAUSE_VERSION}"


def containerd_config(layout: Layout) -> str:
    """containerd 1.6's (config version 2): its own root, state and socket under the
    node's state, runc without systemd (there is none), the CNI bridge below.

    ``restrict_oom_score_adj``: the kubelet asks for a sandbox's oom_score_adj of -998,
    and lowering it needs CAP_SYS_RESOURCE, which root lacks on these machines: runc's
    init dies writing it ("can't get final child's PID from pipe: EOF"). Restricted,
    containerd raises any score below its own to its own, as it does when rootless."""
    root = layout.state / "containerd"
    runc = 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc'
    return f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{layout.containerd_socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  restrict_oom_score_adj = true

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{runc}]
  runtime_type = "io.containerd.runc.v2"

[{runc}.options]
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{layout.cni_conf_dir}"
"""


def cni_conflist(layout: Layout) -> str:
    """The bridge plugin on the host's ``BRIDGE``: no masquerade, so a pod's packet can
    only stay on this host (``host.py`` also drops what would leave the bridge); IPAM
    state under the node's state, not in /var/lib/cni, so ``down`` removes it."""
    bridge = {
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": True,
        "ipMasq": False,
        "hairpinMode": True,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(layout.state / "cni" / "ipam"),
        },
    }
    conflist = {
        "cniVersion": "1.0.0",
        "name": "tierlog",
        "plugins": [bridge, {"type": "portmap", "capabilities": {"portMappings": True}}],
    }
    return json.dumps(conflist, indent=2)


def kubelet_config(layout: Layout) -> str:
    """KubeletConfiguration (JSON is YAML). The kubelet of 1.35+ refuses cgroup v1 unless
    ``failCgroupV1`` is false, and this machine's hierarchies are v1; cgroupfs, as there
    is no systemd. The API server authenticates to it with a client certificate of the
    node's CA; eviction thresholds are low so a busy shared disk does not evict pods, and
    image garbage collection is off (a high threshold of 100): on a disk others fill, it
    deleted the pause image, and every pod after failed to get a sandbox."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "address": GATEWAY,
        "readOnlyPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(layout.pki / "ca.crt")},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDNS": [GATEWAY],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "",
        "podLogsDir": str(layout.pod_logs),
        "failSwapOn": False,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "2%",
            "imagefs.available": "2%",
            "nodefs.inodesFree": "2%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
    }
    return json.dumps(config, indent=2)


def kube_proxy_config(layout: Layout) -> str:
    """KubeProxyConfiguration: iptables mode, its ports on the bridge address."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(layout.kubeconfig("kube-proxy"))},
        "clusterCIDR": POD_SUBNET,
        "bindAddress": GATEWAY,
        "healthzBindAddress": f"{GATEWAY}:10256",
        "metricsBindAddress": f"{GATEWAY}:10249",
        "nodePortAddresses": [f"{GATEWAY}/32"],
        "conntrack": {"maxPerCore": 0},  # leave the host's conntrack table size alone
    }
    return json.dumps(config, indent=2)


def corefile(layout: Layout) -> str:
    """Only the cluster's zones, served on the bridge address: a name outside them is
    refused, never forwarded off the machine. A plugin added here must be imported by
    tests/tools/coredns/main.go too: the node's CoreDNS is built with these alone."""
    zones = f"{CLUSTER_DOMAIN} in-addr.arpa ip6.arpa"
    return f"""{zones}:53 {{
    bind {GATEWAY}
    errors
    kubernetes {zones} {{
        kubeconfig {layout.kubeconfig("coredns")}
        pods insecure
        ttl 5
    }}
    cache 5
}}
"""
