"""The test control plane: a real kube-apiserver over a real etcd answers and stores."""

from __future__ import annotations

import json

import pytest

from tests.support.kube import ControlPlane

pytestmark = pytest.mark.slow


def test_the_api_server_is_ready_and_reports_its_version(control_plane: ControlPlane) -> None:
    status, body = control_plane.request("/version")
    assert status == 200
    version = json.loads(body)
    assert version["gitVersion"].startswith("v1.")
    status, _ = control_plane.request("/readyz")
    assert status == 200


def test_requests_without_the_token_are_refused(control_plane: ControlPlane) -> None:
    anonymous = ControlPlane(
        control_plane.workdir,
        control_plane.server,
        "not-the-token",
        control_plane.ca_file,
        control_plane.kubeconfig,
        [],
    )
    status, _ = anonymous.request("/api/v1/namespaces")
    assert status == 401


def test_kubectl_apply_stores_objects_and_reapplying_is_idempotent(
    control_plane: ControlPlane,
) -> None:
    namespace = control_plane.create_namespace()
    manifest = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "greeting", "namespace": namespace},
            "data": {"hello": "world"},
        }
    )
    first = control_plane.kubectl("apply", "-f", "-", input=manifest)
    assert "configmap/greeting created" in first.stdout
    again = control_plane.kubectl("apply", "-f", "-", input=manifest)
    assert "configmap/greeting unchanged" in again.stdout
    stored = control_plane.get_json("configmap", "greeting", "-n", namespace)
    assert stored["data"] == {"hello": "world"}


def test_the_server_validates_what_it_stores(control_plane: ControlPlane) -> None:
    namespace = control_plane.create_namespace()
    bad = json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "broken", "namespace": namespace},
            "spec": {"replicas": "three"},
        }
    )
    done = control_plane.kubectl("apply", "-f", "-", input=bad, check=False)
    assert done.returncode != 0
    assert "replicas" in done.stderr
