"""``up`` and ``down``: the order the node's pieces start and stop in, and the waits.

``up`` is idempotent: the certificates and configuration are written once (a running
daemon keeps reading them), a daemon already running is left alone, images are rebuilt
(podman's layer cache keeps that short when nothing changed) and re-imported, objects
are applied. ``down`` removes every pod sandbox through the CRI first (so CNI releases
addresses and network namespaces), then stops the daemons in the reverse order, cleans
kube-proxy's iptables rules, undoes ``host.py``'s changes and deletes the state.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.support.cluster import configs, daemons, host, images, manifests
from tests.support.cluster.layout import (
    API_PORT,
    GATEWAY,
    NODE_NAME,
    POD_SUBNET,
    SERVICE_RANGE,
    Layout,
)
from tests.support.cluster.pki import Pki, api_server_url, write_pki
from tests.support.kube import run_kubectl
from tests.tools.cluster_dns import coredns_bin
from tests.tools.control_plane import etcd_bin, kube_apiserver_bin
from tests.tools.cri_tools import crictl_bin
from tests.tools.kube_node import node_bin
from tests.tools.node_packages import package_bin

__all__ = ["START_ORDER", "ClusterError", "down", "free_released_volumes", "up"]

START_ORDER = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "containerd",
    "kubelet",
    "kube-proxy",
    "coredns",
)
_TIMEOUT_S = 300.0  # a cold start on a busy 2-core machine


class ClusterError(Exception):
    """The node did not come up; the message has the failing daemon's log."""


def _say(message: str) -> None:
    print(f"cluster: {message}", file=sys.stderr, flush=True)


def _wait(what: str, ready: Callable[[], bool], layout: Layout, daemon: str) -> None:
    """Poll ``ready`` until true; fail at once if ``daemon`` died, with its log."""
    deadline = time.monotonic() + _TIMEOUT_S
    while not ready():
        if not daemons.is_running(layout, daemon):
            raise ClusterError(f"{daemon} exited:\n{daemons.log_tail(layout, daemon)}")
        if time.monotonic() > deadline:
            raise ClusterError(
                f"{what}: not in {_TIMEOUT_S:.0f} s:\n{daemons.log_tail(layout, daemon)}"
            )
        time.sleep(0.5)


def kubectl(
    layout: Layout, *args: str, input: str | None = None, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    return run_kubectl(layout.admin_kubeconfig, *args, input=input, timeout_s=timeout_s)


def _apply(layout: Layout, objects: Sequence[object]) -> None:
    done = kubectl(
        layout,
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
    )
    if done.returncode != 0:
        raise ClusterError(f"kubectl apply failed: {done.stderr}")


def _ok(command: Sequence[str | Path]) -> bool:
    return (
        subprocess.run([str(part) for part in command], capture_output=True, check=False).returncode
        == 0
    )


# --- the daemons' command lines --------------------------------------------------------------


def _commands(layout: Layout, pki: Pki) -> dict[str, list[str | Path]]:
    etcd_url = f"http://{GATEWAY}:2379"
    return {
        "etcd": [
            etcd_bin(),
            "--name=tierlog-node",
            f"--data-dir={layout.state / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://{GATEWAY}:2380",
            f"--initial-advertise-peer-urls=http://{GATEWAY}:2380",
            f"--initial-cluster=tierlog-node=http://{GATEWAY}:2380",
            "--listen-metrics-urls=",
            "--unsafe-no-fsync",  # a throwaway store for tests: durability not under test
            "--log-level=warn",
        ],
        "kube-apiserver": [
            kube_apiserver_bin(),
            f"--etcd-servers={etcd_url}",
            f"--bind-address={GATEWAY}",
            f"--advertise-address={GATEWAY}",
            f"--secure-port={API_PORT}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_file}",
            f"--token-auth-file={pki.tokens}",
            f"--kubelet-client-certificate={pki.kubelet_client_cert}",
            f"--kubelet-client-key={pki.kubelet_client_key}",
            # The node's name is not in any DNS the API server asks: its address is.
            "--kubelet-preferred-address-types=InternalIP",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--allow-privileged=true",
        ],
        "kube-controller-manager": [
            node_bin("kube-controller-manager"),
            f"--kubeconfig={layout.kubeconfig('kube-controller-manager')}",
            f"--authentication-kubeconfig={layout.kubeconfig('kube-controller-manager')}",
            f"--authorization-kubeconfig={layout.kubeconfig('kube-controller-manager')}",
            f"--bind-address={GATEWAY}",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.service_account_key}",
            f"--root-ca-file={pki.ca_file}",
            f"--cluster-cidr={POD_SUBNET}",
            f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--leader-elect=false",
        ],
        "kube-scheduler": [
            node_bin("kube-scheduler"),
            f"--kubeconfig={layout.kubeconfig('kube-scheduler')}",
            f"--authentication-kubeconfig={layout.kubeconfig('kube-scheduler')}",
            f"--authorization-kubeconfig={layout.kubeconfig('kube-scheduler')}",
            f"--bind-address={GATEWAY}",
            "--leader-elect=false",
        ],
        "containerd": [package_bin("containerd"), f"--config={layout.config('containerd.toml')}"],
        "kubelet": [
            node_bin("kubelet"),
            f"--config={layout.config('kubelet.json')}",
            f"--kubeconfig={layout.kubeconfig('kubelet')}",
            f"--root-dir={layout.kubelet_root}",
            f"--cert-dir={layout.kubelet_root / 'pki'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={GATEWAY}",
        ],
        "kube-proxy": [
            node_bin("kube-proxy"),
            f"--config={layout.config('kube-proxy.json')}",
            f"--hostname-override={NODE_NAME}",
        ],
        "coredns": [coredns_bin(), "-conf", layout.config("Corefile")],
    }


def _write_if_changed(path: Path, text: str) -> None:
    """A running kube-proxy watches its file and exits on any write ("content of the proxy
    server's configuration file was updated"), even of the same text: leave it be."""
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def _write_configs(layout: Layout) -> None:
    files = {
        "containerd.toml": configs.containerd_config(layout),
        "kubelet.json": configs.kubelet_config(layout),
        "kube-proxy.json": configs.kube_proxy_config(layout),
        "Corefile": configs.corefile(layout),
    }
    layout.config("x").parent.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        _write_if_changed(layout.config(name), text)
    layout.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    _write_if_changed(layout.cni_conf_dir / "10-tierlog.conflist", configs.cni_conflist(layout))
    for index in range(manifests.VOLUME_COUNT):
        volume = layout.local_volumes / manifests.volume_name(index)
        volume.mkdir(parents=True, exist_ok=True)


def _pki(layout: Layout) -> Pki:
    """Written by the first ``up``; read back by a later one (the daemons use the files)."""
    marker = layout.pki / "pki.json"
    if marker.is_file():
        return Pki(**{key: Path(value) for key, value in json.loads(marker.read_text()).items()})
    pki = write_pki(layout)
    marker.write_text(json.dumps({key: str(value) for key, value in vars(pki).items()}))
    return pki


def free_released_volumes(layout: Layout) -> None:
    """Free the local volumes whose claims are gone: delete, wipe, and apply them again.

    Kubernetes leaves such a volume ``Released`` (``Retain``); without this, the eight
    volumes run out after a few clusters' namespaces were deleted.
    """
    listed = kubectl(layout, "get", "pv", "-o", "json")
    if listed.returncode != 0:
        raise ClusterError(f"kubectl get pv failed: {listed.stderr}")
    for volume in json.loads(listed.stdout)["items"]:
        if volume["status"].get("phase") != "Released" or "local" not in volume["spec"]:
            continue
        name = volume["metadata"]["name"]
        _say(f"recycling local volume {name}")
        kubectl(layout, "delete", "pv", name, "--wait=true")
        path = Path(volume["spec"]["local"]["path"])
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
    _apply(layout, manifests.local_volumes(layout))


def _start(layout: Layout, commands: dict[str, list[str | Path]], name: str) -> None:
    if not daemons.is_running(layout, name):
        _say(f"starting {name}")
    daemons.start(layout, name, commands[name])


def up(layout: Layout) -> str:
    """Bring the node up; the tierlog image's ``repository:tag`` loaded into it."""
    started = time.monotonic()
    layout.state.mkdir(parents=True, exist_ok=True)
    host.prepare_host(layout)
    pki = _pki(layout)
    _write_configs(layout)
    commands = _commands(layout, pki)
    for name in ("etcd", "kube-apiserver"):
        _start(layout, commands, name)
    _wait(
        "the API server's /readyz",
        lambda: kubectl(layout, "get", "--raw", "/readyz").returncode == 0,
        layout,
        "kube-apiserver",
    )
    for name in ("kube-controller-manager", "kube-scheduler", "containerd"):
        _start(layout, commands, name)
    ctr: list[str | Path] = [package_bin("ctr"), "--address", layout.containerd_socket, "version"]
    _wait("containerd's socket", lambda: _ok(ctr), layout, "containerd")
    image = images.build_images(layout)
    for name in ("kubelet", "kube-proxy", "coredns"):
        _start(layout, commands, name)
    _apply(layout, manifests.coredns_access())
    free_released_volumes(layout)
    _wait(
        f"node {NODE_NAME} Ready",
        lambda: (
            kubectl(
                layout, "wait", "--for=condition=Ready", f"node/{NODE_NAME}", "--timeout=5s"
            ).returncode
            == 0
        ),
        layout,
        "kubelet",
    )
    took = time.monotonic() - started
    _say(f"node {NODE_NAME} Ready in {took:.0f} s; API server {api_server_url()}")
    return image


def down(layout: Layout) -> None:
    """Stop and remove everything ``up`` started or wrote; safe to run twice."""
    if daemons.is_running(layout, "kubelet"):
        daemons.stop(layout, "kubelet")
    if daemons.is_running(layout, "containerd"):
        _say("removing every pod sandbox (crictl rmp --all --force)")
        crictl = [crictl_bin(), f"--runtime-endpoint=unix://{layout.containerd_socket}"]
        subprocess.run(
            [*map(str, crictl), "rmp", "--all", "--force"], capture_output=True, check=False
        )
    for name in reversed(START_ORDER):
        if daemons.is_running(layout, name):
            _say(f"stopping {name}")
        daemons.stop(layout, name)
    host.remove_kubernetes_chains()
    _remove_container_log_links(layout)
    host.restore_host(layout)
    _unmount_under(layout.state)
    shutil.rmtree(layout.state, ignore_errors=True)
    _say("down: state removed")


def _remove_container_log_links(layout: Layout) -> None:
    """The kubelet links each container's log into /var/log/containers (a fixed path)."""
    for link in Path("/var/log/containers").glob("*.log"):
        if link.is_symlink() and str(link.readlink()).startswith(str(layout.pod_logs)):
            link.unlink()


def _unmount_under(root: Path) -> None:
    """Mounts containerd and the kubelet left under the state (deepest first)."""
    if not root.exists():
        return
    prefix = str(root.resolve())
    with Path("/proc/self/mounts").open() as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
