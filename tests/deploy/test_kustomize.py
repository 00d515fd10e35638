"""deploy/base: the kustomize base that ``kubectl apply -k`` installs, against a real API server."""

from __future__ import annotations

import pytest
import yaml

from tests.deploy.kustomize_base import OPERATOR_YAML, render_operator_manifests
from tests.support.kube import ControlPlane

pytestmark = pytest.mark.go_tools  # helm renders the operator's manifests; kube-apiserver

BASE = OPERATOR_YAML.parent
CRD_FILES = sorted((BASE / "crds").glob("*.yaml"))


def test_operator_yaml_is_the_chart_rendered_for_kustomize() -> None:
    assert OPERATOR_YAML.read_text() == render_operator_manifests(), (
        "deploy/base/operator.yaml is stale: run `python -m tests.deploy.kustomize_base`"
    )


def test_the_base_builds_the_crds_the_namespace_and_the_operator(
    control_plane: ControlPlane,
) -> None:
    built = control_plane.kubectl("kustomize", str(BASE)).stdout
    documents = [doc for doc in yaml.safe_load_all(built) if doc]
    kinds = sorted(doc["kind"] for doc in documents)
    crds = [path for path in CRD_FILES if path.name != "kustomization.yaml"]
    assert kinds == sorted(
        ["CustomResourceDefinition"] * len(crds)
        + [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Service",
        ]
    )
    for doc in documents:
        if doc["kind"] in {"ServiceAccount", "Deployment", "Service"}:
            assert doc["metadata"]["namespace"] == "tierlog-system"


@pytest.mark.slow
def test_kubectl_apply_k_is_accepted(control_plane: ControlPlane) -> None:
    control_plane.kubectl("apply", "-k", str(BASE))
    for path in CRD_FILES:
        if path.name == "kustomization.yaml":
            continue
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        control_plane.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    deployment = control_plane.get_json("deployment", "tierlog-operator", "-n", "tierlog-system")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "tierlog"
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    again = control_plane.kubectl("apply", "-k", str(BASE)).stdout  # idempotent
    assert all(line.endswith("unchanged") for line in again.splitlines()), again
