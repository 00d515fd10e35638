"""A Kubernetes control plane for the tests: kube-apiserver, kubectl and etcd from Go source.

Envtest style: nothing but the Go module proxy. ``tests/tools/kubernetes/go.mod`` is a
wrapper module that requires ``k8s.io/kubernetes`` and pins each of its staging modules
(``k8s.io/api``, ``k8s.io/apimachinery``...) to the published ``v0.X.Y`` of the same
release; ``go build`` of ``cmd/kube-apiserver`` and ``cmd/kubectl`` in it gives the
release's binaries, stamped with their version as Kubernetes' own build does (kubectl
and the server compare versions). ``tests/tools/etcd/go.mod`` builds the etcd server
that release is tested with (Debian's etcd 3.4 is older than it supports).

The versions are read from those go.mod files, so a bump is one edit there (plus
``go mod tidy``). Builds take many minutes on a small machine, so they go into the
shared cache (``~/.cache/tierlog-tools/<tool>-<version>``) once per machine; the
checkout's ``.cache/tools`` holds links to them.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.tools.toolkit import (
    REPO,
    BootstrapError,
    Tool,
    go_build,
    go_command_tool,
    link_into,
    run,
    shared_build,
)

__all__ = [
    "ETCD",
    "ETCD_VERSION",
    "KUBERNETES",
    "KUBERNETES_VERSION",
    "etcd_bin",
    "kube_apiserver_bin",
    "kubectl_bin",
    "kubernetes_ldflags",
]

KUBERNETES_MODULE_DIR = REPO / "tests" / "tools" / "kubernetes"
ETCD_MODULE_DIR = REPO / "tests" / "tools" / "etcd"
_ETCD_SERVER = "go.etcd.io/etcd/server/v3"


def required_version(module_dir: Path, module: str) -> str:
    """The version of ``module`` that the wrapper go.mod in ``module_dir`` requires."""
    text = (module_dir / "go.mod").read_text()
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", text, re.MULTILINE)
    if found is None:
        raise BootstrapError(f"{module_dir / 'go.mod'} does not require {module}")
    return found.group(1)


KUBERNETES_VERSION = required_version(KUBERNETES_MODULE_DIR, "k8s.io/kubernetes")
ETCD_VERSION = required_version(ETCD_MODULE_DIR, _ETCD_SERVER)


# --- kube-apiserver and kubectl -------------------------------------------------------------


def kubernetes_ldflags() -> str:
    major, minor = KUBERNETES_VERSION.removeprefix("v").split(".")[:2]
    stamps = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamps += [
            f"-X {package}.gitVersion={KUBERNETES_VERSION}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return " ".join(["-s", "-w", *stamps])


def _build_kubernetes(into: Path) -> None:
    print(
        f"  building kube-apiserver and kubectl {KUBERNETES_VERSION} from the Go module proxy "
        "(10-30 minutes on 2 cores)"
    )
    go_build(
        KUBERNETES_MODULE_DIR,
        ["k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kubectl"],
        f"{into}/",
        kubernetes_ldflags(),
    )


def _install_kubernetes(home: Path) -> None:
    built = shared_build(f"kubernetes-{KUBERNETES_VERSION}", _build_kubernetes)
    link_into(home, built, ["kube-apiserver", "kubectl"])
    version = run([home / "kube-apiserver", "--version"], what="kube-apiserver --version")
    if KUBERNETES_VERSION not in version:
        raise BootstrapError(f"expected {KUBERNETES_VERSION}, kube-apiserver says {version!r}")
    print(f"  kube-apiserver runs: {version.strip()}")


KUBERNETES = Tool(
    name=f"kubernetes-{KUBERNETES_VERSION}",
    inputs=lambda: [Path(__file__), *sorted(KUBERNETES_MODULE_DIR.glob("go.*"))],
    install=_install_kubernetes,
    compiled=True,
)


# --- etcd -----------------------------------------------------------------------------------


ETCD = go_command_tool(
    "etcd", ETCD_VERSION, ETCD_MODULE_DIR, _ETCD_SERVER, command="etcd", version_flag="--version"
)


def kube_apiserver_bin() -> Path:
    return KUBERNETES.require_current() / "kube-apiserver"


def kubectl_bin() -> Path:
    return KUBERNETES.require_current() / "kubectl"


def etcd_bin() -> Path:
    return ETCD.require_current() / "etcd"
