"""crictl (cri-tools) from the Go module proxy: the CRI's own command line.

``make cluster-down`` removes every pod sandbox with ``crictl rmp --all --force`` before
it stops containerd, so the CNI plugin releases each pod's address and network namespace
(``ctr`` does not know the CRI's sandboxes). It is also how to look at the node's pods
and images by hand (``crictl --runtime-endpoint unix://.cache/cluster/containerd/...``).
"""

from __future__ import annotations

from pathlib import Path

from tests.tools.control_plane import required_version
from tests.tools.toolkit import REPO, go_command_tool

__all__ = ["CRI_TOOLS", "CRI_TOOLS_VERSION", "crictl_bin"]

CRI_TOOLS_MODULE_DIR = REPO / "tests" / "tools" / "cri-tools"
CRI_TOOLS_VERSION = required_version(CRI_TOOLS_MODULE_DIR, "sigs.k8s.io/cri-tools")


CRI_TOOLS = go_command_tool(
    "cri-tools",
    CRI_TOOLS_VERSION,
    CRI_TOOLS_MODULE_DIR,
    "sigs.k8s.io/cri-tools/cmd/crictl",
    command="crictl",
    version_flag="--version",
    ldflags=f"-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version={CRI_TOOLS_VERSION}",
    cold_build="~2 minutes",
)


def crictl_bin() -> Path:
    return CRI_TOOLS.require_current() / "crictl"
