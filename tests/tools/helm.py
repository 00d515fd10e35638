"""Helm, compiled from the Go module proxy with the machine's Go.

``go install helm.sh/helm/v3/cmd/helm@HELM_VERSION`` with ``-ldflags`` as Helm's Makefile
sets them: its version, and the Kubernetes version ``helm template`` and ``helm lint``
assume (one above its client-go's v0 major, the same minor; unset it would be 1.20),
into the shared cache once per machine; the
checkout's ``.cache/tools/helm-VERSION/helm`` is a copy of it. The build takes
minutes (Helm pulls much of client-go), the copy a second.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.tools.toolkit import BootstrapError, Tool, require, run, shared_build

__all__ = ["HELM", "HELM_VERSION", "helm_bin"]

HELM_VERSION = "v3.22.0"
KUBE_VERSION = ("1", "37")  # Helm v3.22.0's go.mod requires k8s.io/client-go v0.37.0
_MODULE = "helm.sh/helm/v3"
_KUBE_VERSION_PKGS = ("lint/rules", "chartutil")


def _build(into: Path) -> None:
    go = require("go", "install Go 1.24+ (https://go.dev/dl or the golang package)")
    print(f"  building Helm {HELM_VERSION} from the Go module proxy (a few minutes)")
    major, minor = KUBE_VERSION
    ldflags = " ".join(
        [
            "-s -w",
            f"-X {_MODULE}/internal/version.version={HELM_VERSION}",
            *(f"-X {_MODULE}/pkg/{pkg}.k8sVersionMajor={major}" for pkg in _KUBE_VERSION_PKGS),
            *(f"-X {_MODULE}/pkg/{pkg}.k8sVersionMinor={minor}" for pkg in _KUBE_VERSION_PKGS),
        ]
    )
    run(
        [go, "install", "-ldflags", ldflags, f"{_MODULE}/cmd/helm@{HELM_VERSION}"],
        what=f"go install {_MODULE}/cmd/helm@{HELM_VERSION}",
        env={"GOBIN": str(into), "CGO_ENABLED": "0"},
    )


def _install(home: Path) -> None:
    built = shared_build(f"helm-{HELM_VERSION}", _build)
    binary = home / "helm"
    try:
        os.link(built / "helm", binary)
    except OSError:  # another filesystem
        shutil.copy2(built / "helm", binary)
    version = run([binary, "version", "--template", "{{.Version}}"], what="helm version")
    if version.strip() != HELM_VERSION:
        raise BootstrapError(f"expected Helm {HELM_VERSION}, `helm version` says {version!r}")
    print(f"  helm runs: {version.strip()}")


HELM = Tool(
    name=f"helm-{HELM_VERSION}", inputs=lambda: [Path(__file__)], install=_install, compiled=True
)


def helm_bin() -> Path:
    """The installed ``helm`` the tests run."""
    return HELM.require_current() / "helm"
