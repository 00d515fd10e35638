"""The node's container runtime, network and image builder from Debian's packages.

containerd (with its CRI plugin and runc shim), runc, the CNI plugins, iptables and
conntrack (kube-proxy's), podman (builds the project's ``Dockerfile``, daemonless) and
debootstrap (makes the base image from Debian packages, as no registry is reachable).
``apt-get install`` as root: unlike Prometheus's package, none of these starts a daemon
on a machine without systemd, and containerd's shim finds runc on PATH. The tool's home
links each program, so ``make cluster`` fails early, with this tool's name, when one is
missing; ``versions.txt`` records what Debian installed.
"""

from __future__ import annotations

from pathlib import Path

from tests.tools.toolkit import BootstrapError, Tool, require, run

__all__ = ["CNI_BIN_DIR", "NODE_PACKAGES", "package_bin"]

_PACKAGES = (
    "containerd",
    "runc",
    "containernetworking-plugins",
    "iptables",
    "conntrack",
    "podman",
    "debootstrap",
)
_PROGRAMS = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "podman", "debootstrap")
CNI_BIN_DIR = Path("/usr/lib/cni")  # where Debian's containernetworking-plugins puts them


def _install(home: Path) -> None:
    apt_get = require("apt-get", "the node's runtime comes from Debian's packages (Debian 12+)")
    print(f"  apt-get install {' '.join(_PACKAGES)}")
    run([apt_get, "update", "-qq"], what="apt-get update (run the bootstrap as root)")
    run(
        [apt_get, "install", "-y", "-qq", "--no-install-recommends", *_PACKAGES],
        what="apt-get install of the node's packages",
        env={"DEBIAN_FRONTEND": "noninteractive"},
    )
    for program in _PROGRAMS:
        (home / program).symlink_to(require(program, f"apt-get install {' '.join(_PACKAGES)}"))
    if not (CNI_BIN_DIR / "bridge").is_file():
        raise BootstrapError(f"containernetworking-plugins left no {CNI_BIN_DIR}/bridge")
    versions = run(
        ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *_PACKAGES],
        what="dpkg-query of the node's packages",
    )
    (home / "versions.txt").write_text(versions)
    print("  " + versions.strip().replace("\n", "\n  "))


NODE_PACKAGES = Tool(name="node-packages", inputs=lambda: [Path(__file__)], install=_install)


def package_bin(program: str) -> Path:
    """One of the programs the packages installed, through the tool's link."""
    return NODE_PACKAGES.require_current() / program
