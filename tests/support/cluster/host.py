"""What the node changes on the host, and how ``down`` puts it back.

The bridge the pods hang on (made here, before anything listens on its address), a
blackhole route for the Service range and two FORWARD rules that keep pod traffic on the
bridge: with them, no packet of a pod or of an unprogrammed ClusterIP can leave the
machine, whatever a pod tries. Kernel settings that the node needs (forwarding, bridged
traffic through iptables, for kube-proxy) or that the kubelet sets on start
(``vm.overcommit_memory``, ``kernel.panic*``) are saved first and restored by ``down``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.support.cluster.layout import BRIDGE, GATEWAY, POD_SUBNET, SERVICE_RANGE, Layout

__all__ = ["prepare_host", "remove_kubernetes_chains", "restore_host"]

_SET_BY_US = {"net/ipv4/ip_forward": "1", "net/bridge/bridge-nf-call-iptables": "1"}
_SET_BY_KUBELET = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
_COMMENT = "tierlog cluster: pod traffic stays on the bridge"
_FORWARD_RULES = (
    ["-i", BRIDGE, "!", "-o", BRIDGE],
    ["!", "-i", BRIDGE, "-o", BRIDGE],
)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["ip", *args], check=check)


def _run(command: Sequence[str], *, check: bool) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(command), capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return done


def _sysctl(key: str) -> Path:
    return Path("/proc/sys") / key


def prepare_host(layout: Layout) -> None:
    """Idempotent: a second ``up`` finds everything in place."""
    if not layout.saved_sysctls.is_file():
        saved = {key: _sysctl(key).read_text().strip() for key in (*_SET_BY_US, *_SET_BY_KUBELET)}
        layout.saved_sysctls.write_text(json.dumps(saved, indent=2))
    if _ip("link", "show", BRIDGE, check=False).returncode != 0:
        _ip("link", "add", BRIDGE, "type", "bridge")
    prefix = POD_SUBNET.split("/")[1]
    if GATEWAY not in _ip("-4", "addr", "show", "dev", BRIDGE).stdout:
        _ip("addr", "add", f"{GATEWAY}/{prefix}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    _ip("route", "replace", "blackhole", SERVICE_RANGE)
    for rule in _FORWARD_RULES:
        spec = [*rule, "-m", "comment", "--comment", _COMMENT, "-j", "DROP"]
        if _run(["iptables", "-C", "FORWARD", *spec], check=False).returncode != 0:
            _run(["iptables", "-I", "FORWARD", *spec], check=True)
    for key, value in _SET_BY_US.items():
        _sysctl(key).write_text(value)


def restore_host(layout: Layout) -> None:
    """Undo ``prepare_host``; each step tolerates a part that is already gone."""
    for rule in _FORWARD_RULES:
        spec = [*rule, "-m", "comment", "--comment", _COMMENT, "-j", "DROP"]
        while _run(["iptables", "-D", "FORWARD", *spec], check=False).returncode == 0:
            pass
    _ip("route", "del", "blackhole", SERVICE_RANGE, check=False)
    _ip("link", "del", BRIDGE, check=False)
    if layout.saved_sysctls.is_file():
        for key, value in json.loads(layout.saved_sysctls.read_text()).items():
            _sysctl(key).write_text(value)
        layout.saved_sysctls.unlink()


def remove_kubernetes_chains() -> None:
    """Every ``KUBE-*`` chain (kube-proxy's, the kubelet's canaries) and each rule that
    jumps to one, IPv4 and IPv6: no other Kubernetes runs on these machines."""
    for program in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            listed = _run([program, "-t", table, "-S"], check=False).stdout.splitlines()
            # shlex: the rules' comments are quoted phrases.
            jumps = [
                shlex.split(line)[1:]
                for line in listed
                if line.startswith("-A ") and "KUBE-" in line
            ]
            for rule in jumps:
                if not rule[0].startswith("KUBE-"):  # a built-in chain's jump into ours
                    _run([program, "-t", table, "-D", *rule], check=False)
            chains = [line.split()[1] for line in listed if line.startswith("-N KUBE-")]
            for chain in chains:
                _run([program, "-t", table, "-F", chain], check=False)
            for chain in chains:
                _run([program, "-t", table, "-X", chain], check=False)
