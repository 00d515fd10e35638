"""CoreDNS, the cluster DNS of ``make cluster``, from the Go module proxy.

``tests/tools/coredns/main.go`` is CoreDNS's main with only the plugins the node's
Corefile names (``kubernetes`` among them); its go.mod requires the release and pins
what those need. Leaving out the default set's other plugins (and the cloud SDKs they
bring) cuts a cold build's CPU time by 39% and its module downloads from about 1.5 GB
to 0.23 GB (docs/BENCHMARKS.md). The node runs
it as a process on the host, not as a pod: it needs no image, and it listens on the pod
bridge's gateway address, which every pod reaches without a Service or kube-proxy.
"""

from __future__ import annotations

from pathlib import Path

from tests.tools.control_plane import required_version
from tests.tools.toolkit import REPO, go_command_tool

__all__ = ["COREDNS", "COREDNS_VERSION", "coredns_bin"]

COREDNS_MODULE_DIR = REPO / "tests" / "tools" / "coredns"
_MODULE = "github.com/coredns/coredns"
COREDNS_VERSION = required_version(COREDNS_MODULE_DIR, _MODULE)


COREDNS = go_command_tool(
    "coredns",
    COREDNS_VERSION,
    COREDNS_MODULE_DIR,
    ".",
    command="coredns",
    version_flag="-version",
    cold_build="~3 minutes",
)


def coredns_bin() -> Path:
    return COREDNS.require_current() / "coredns"
