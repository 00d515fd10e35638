"""CoreDNS, the cluster DNS of ``make cluster``, from the Go module proxy.

``tests/tools/coredns/go.mod`` requires ``github.com/coredns/coredns`` (a ``tool``
line: its main package is the module's root) and pins what it needs; ``go build`` gives
the release's binary with its default plugins, ``kubernetes`` among them. The node runs
it as a process on the host, not as a pod: it needs no image, and it listens on the pod
bridge's gateway address, which every pod reaches without a Service or kube-proxy.
"""

from __future__ import annotations

from pathlib import Path

from tests.tools.control_plane import required_version
from tests.tools.toolkit import REPO, BootstrapError, Tool, go_build, link_into, run, shared_build

__all__ = ["COREDNS", "COREDNS_VERSION", "coredns_bin"]

COREDNS_MODULE_DIR = REPO / "tests" / "tools" / "coredns"
_MODULE = "github.com/coredns/coredns"
COREDNS_VERSION = required_version(COREDNS_MODULE_DIR, _MODULE)


def _build(into: Path) -> None:
    print(f"  building CoreDNS {COREDNS_VERSION} from the Go module proxy (~5 minutes cold)")
    go_build(COREDNS_MODULE_DIR, [_MODULE], str(into / "coredns"), "-s -w")


def _install(home: Path) -> None:
    built = shared_build(f"coredns-{COREDNS_VERSION}", _build)
    link_into(home, built, ["coredns"])
    version = run([home / "coredns", "-version"], what="coredns -version")
    if COREDNS_VERSION.removeprefix("v") not in version:
        raise BootstrapError(f"expected CoreDNS {COREDNS_VERSION}, it says {version!r}")
    print(f"  coredns runs: {version.splitlines()[0]}")


COREDNS = Tool(
    name=f"coredns-{COREDNS_VERSION}",
    inputs=lambda: [Path(__file__), *sorted(COREDNS_MODULE_DIR.glob("go.*"))],
    install=_install,
)


def coredns_bin() -> Path:
    return COREDNS.require_current() / "coredns"
