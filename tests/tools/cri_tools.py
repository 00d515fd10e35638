"""crictl (cri-tools) from the Go module proxy: the CRI's own command line.

``make cluster-down`` removes every pod sandbox with ``crictl rmp --all --force`` before
it stops containerd, so the CNI plugin releases each pod's address and network namespace
(``ctr`` does not know the CRI's sandboxes). It is also how to look at the node's pods
and images by hand (``crictl --runtime-endpoint unix://.cache/cluster/containerd/...``).
"""

from __future__ import annotations

from pathlib import Path

from tests.tools.control_plane import required_version
from tests.tools.toolkit import REPO, BootstrapError, Tool, go_build, link_into, run, shared_build

__all__ = ["CRI_TOOLS", "CRI_TOOLS_VERSION", "crictl_bin"]

CRI_TOOLS_MODULE_DIR = REPO / "tests" / "tools" / "cri-tools"
CRI_TOOLS_VERSION = required_version(CRI_TOOLS_MODULE_DIR, "sigs.k8s.io/cri-tools")


def _build(into: Path) -> None:
    print(f"  building crictl {CRI_TOOLS_VERSION} from the Go module proxy (~2 minutes)")
    go_build(
        CRI_TOOLS_MODULE_DIR,
        ["sigs.k8s.io/cri-tools/cmd/crictl"],
        str(into / "crictl"),
        f"-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version={CRI_TOOLS_VERSION}",
    )


def _install(home: Path) -> None:
    built = shared_build(f"cri-tools-{CRI_TOOLS_VERSION}", _build)
    link_into(home, built, ["crictl"])
    version = run([home / "crictl", "--version"], what="crictl --version")
    if CRI_TOOLS_VERSION not in version:
        raise BootstrapError(f"expected crictl {CRI_TOOLS_VERSION}, it says {version!r}")
    print(f"  crictl runs: {version.strip()}")


CRI_TOOLS = Tool(
    name=f"cri-tools-{CRI_TOOLS_VERSION}",
    inputs=lambda: [Path(__file__), *sorted(CRI_TOOLS_MODULE_DIR.glob("go.*"))],
    install=_install,
)


def crictl_bin() -> Path:
    return CRI_TOOLS.require_current() / "crictl"
