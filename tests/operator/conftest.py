"""The CRDs installed in the session's API server (``control_plane``, tests/support/kube.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kube import ControlPlane

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "deploy" / "base" / "crds"
EXAMPLES_DIR = REPO / "deploy" / "examples"


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> ControlPlane:
    """The control plane with our CRDs applied from the committed files and established."""
    control_plane.kubectl("apply", "--server-side", "-k", str(CRD_DIR))
    control_plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/tierlogclusters.tierlog.io",
        "crd/tierlogtopics.tierlog.io",
    )
    return control_plane
