"""The rest of a one-node cluster from the control plane's own sources.

kubelet, kube-controller-manager, kube-scheduler and kube-proxy come from the same
wrapper module as kube-apiserver (``tests/tools/kubernetes/go.mod``, whose ``tool`` lines
keep its go.sum complete for them), so the node runs the very release of the API server
and no version skew has to be reasoned about. The pod sandbox's ``pause`` program is the
C file that release ships (``build/pause/linux/pause.c`` in the module download),
compiled static: no registry is reachable here to pull ``registry.k8s.io/pause``.

With the API server's build in Go's cache this is ~4 minutes on 2 cores; cold, it is the
API server's 10-30 minutes again. Kept in the shared cache like the API server.
"""

from __future__ import annotations

from pathlib import Path

from tests.tools.control_plane import (
    KUBERNETES_MODULE_DIR,
    KUBERNETES_VERSION,
    kubernetes_ldflags,
)
from tests.tools.toolkit import (
    BootstrapError,
    Tool,
    go_build,
    link_into,
    require,
    run,
    shared_build,
)

__all__ = ["KUBE_NODE", "NODE_PROGRAMS", "PAUSE_VERSION", "node_bin"]

NODE_PROGRAMS = ("kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy")
PAUSE_VERSION = "3.10"  # the tag the sandbox image gets; pause.c prints it with -v


def _module_source() -> Path:
    """Where ``go mod download`` put the k8s.io/kubernetes release (for pause.c)."""
    go = require("go", "install Go 1.26+ (https://go.dev/dl)")
    found = run(
        [go, "mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"],
        what="go mod download k8s.io/kubernetes",
        cwd=KUBERNETES_MODULE_DIR,
    )
    for line in found.splitlines():
        key, _, value = line.strip().partition(": ")
        if key == '"Dir"':
            return Path(value.strip('",'))
    raise BootstrapError(f"go mod download named no directory:\n{found}")


def _build(into: Path) -> None:
    print(
        f"  building {', '.join(NODE_PROGRAMS)} {KUBERNETES_VERSION} from the Go module proxy "
        "(~4 minutes after the API server's build, 10-30 cold)"
    )
    go_build(
        KUBERNETES_MODULE_DIR,
        [f"k8s.io/kubernetes/cmd/{program}" for program in NODE_PROGRAMS],
        f"{into}/",
        kubernetes_ldflags(),
    )
    cc = require("cc", "install a C compiler (apt-get install gcc libc6-dev)")
    pause_c = _module_source() / "build" / "pause" / "linux" / "pause.c"
    print(f"  compiling pause {PAUSE_VERSION} from {pause_c.name}")
    run(
        [cc, "-Os", "-static", f"-DVERSION={PAUSE_VERSION}", "-o", into / "pause", pause_c],
        what="cc pause.c",
    )


def _install(home: Path) -> None:
    built = shared_build(f"kubernetes-node-{KUBERNETES_VERSION}", _build)
    link_into(home, built, [*NODE_PROGRAMS, "pause"])
    for program in NODE_PROGRAMS:
        version = run([home / program, "--version"], what=f"{program} --version").strip()
        if KUBERNETES_VERSION not in version:
            raise BootstrapError(f"expected {KUBERNETES_VERSION}, {program} says {version!r}")
    print(f"  node programs run: {KUBERNETES_VERSION}")


KUBE_NODE = Tool(
    name=f"kubernetes-node-{KUBERNETES_VERSION}",
    inputs=lambda: [Path(__file__), *sorted(KUBERNETES_MODULE_DIR.glob("go.*"))],
    install=_install,
    compiled=True,
)


def node_bin(program: str) -> Path:
    """One of ``NODE_PROGRAMS`` or ``pause``, from the installed tool."""
    return KUBE_NODE.require_current() / program
