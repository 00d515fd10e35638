"""The operator as a process against a real API server, with real sidecars as brokers.

There is no kubelet or controller-manager in the test control plane: where pods must
exist, ``Brokers`` (conftest.py) starts real sidecars, creates their Pod objects from the
StatefulSet's template and writes their status itself. Nothing collects garbage either,
so objects a deleted cluster owned stay behind; the tests check the owner references
that would take them.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.operator.conftest import Brokers, RunningOperator, wait_for
from tests.support.kube import ControlPlane
from tierlog.client import AdminClient

pytestmark = pytest.mark.slow


def apply(plane: ControlPlane, namespace: str, document: dict[str, Any]) -> None:
    plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(document))


def cluster(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogCluster",
        "metadata": {"name": name},
        "spec": spec,
    }


def condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        c for c in body.get("status", {}).get("conditions", []) if c["type"] == kind
    )
    return found


def get(plane: ControlPlane, namespace: str, *what: str) -> dict[str, Any]:
    found: dict[str, Any] = plane.get_json(*what, "-n", namespace)
    return found


def events(plane: ControlPlane, namespace: str) -> list[tuple[str, str]]:
    listed = plane.get_json("events", "-n", namespace)["items"]
    return [(event["reason"], event.get("message", "")) for event in listed]


def test_a_cluster_becomes_objects_status_and_conditions(
    kube: ControlPlane,
    operator: RunningOperator,
    brokers_for: Callable[[str, str], Brokers],
) -> None:
    ns = operator.namespace
    apply(kube, ns, cluster("demo", brokers=2))
    sts = wait_for("the StatefulSet", lambda: get(kube, ns, "statefulset", "demo"))
    assert sts["spec"]["replicas"] == 2
    assert sts["spec"]["updateStrategy"]["type"] == "OnDelete"
    owner = sts["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("TierlogCluster", "demo", True)
    for kind, name in [
        ("service", "demo"),
        ("service", "demo-brokers"),
        ("configmap", "demo-config"),
        ("poddisruptionbudget", "demo"),
    ]:
        assert get(kube, ns, kind, name)["metadata"]["ownerReferences"][0]["name"] == "demo"

    def waiting() -> dict[str, Any] | None:
        body = get(kube, ns, "tierlogcluster", "demo")
        return body if body.get("status", {}).get("observedGeneration") == 1 else None

    body = wait_for("a first status", waiting)
    assert condition(body, "Ready")["status"] == "False"
    assert condition(body, "Progressing")["reason"] == "BrokersStarting"
    assert [b["state"] for b in body["status"]["brokers"]] == ["Missing", "Missing"]

    brokers = brokers_for(ns, "demo")
    for node in range(2):
        brokers.start(node)

    def ready() -> dict[str, Any] | None:
        body = get(kube, ns, "tierlogcluster", "demo")
        return body if condition(body, "Ready")["status"] == "True" else None

    body = wait_for("Ready", ready)
    assert condition(body, "Progressing")["status"] == "False"
    assert condition(body, "Degraded")["status"] == "False"
    assert condition(body, "ReconciliationPaused")["status"] == "False"
    assert body["status"]["readyBrokers"] == 2
    assert [b["state"] for b in body["status"]["brokers"]] == ["Running", "Running"]
    table = kube.kubectl("get", "tierlogclusters", "-n", ns).stdout
    assert table.splitlines()[1].split()[:4] == ["demo", "2", "2", "True"]

    with urllib.request.urlopen(operator.health_url, timeout=5) as answer:
        assert answer.status == 200
    with urllib.request.urlopen(operator.metrics_url, timeout=5) as answer:
        text = answer.read().decode()
    assert 'tierlog_operator_reconciliations_total{kind="TierlogCluster"}' in text
    assert "tierlog_operator_reconcile_duration_seconds_bucket" in text
    assert AdminClient(brokers.sidecars[0].address).list_topics() == {}
