"""``helm upgrade`` and ``helm uninstall`` of the chart on the real node, with a cluster
running, as docs/KUBERNETES.md says: an upgrade replaces the operator pod and leaves the
brokers alone; an uninstall removes the operator but keeps the CRDs (``crds.keep``), and
with them the cluster, whose brokers keep serving ("brokers keep serving, changes wait");
installing again takes the cluster back without restarting a broker."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.charts.helm import CHART
from tests.e2e.conftest import OPERATOR_NAMESPACE, RELEASE, Node
from tests.e2e.workloads import (
    RECORDS,
    Brokers,
    apply,
    count_records,
    make_topic,
    produce_records,
    run_job,
)

pytestmark = pytest.mark.e2e

CRDS = ("tierlogclusters.tierlog.io", "tierlogtopics.tierlog.io")
OPERATOR = "deployment/tierlog-operator"


@pytest.fixture(scope="module")
def brokers(one_node: Node, operator: str) -> Iterator[Brokers]:
    namespace = one_node.create_namespace("released")
    cluster = {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogCluster",
        "metadata": {"name": "released"},
        "spec": {"brokers": 3},
    }
    try:
        apply(one_node, namespace, cluster)
        one_node.wait(namespace, "--for=condition=Ready", "tierlogcluster/released")
        yield Brokers(namespace, "released")
    finally:
        one_node.delete_namespace(namespace)


def _uids(node: Node, namespace: str, selector: str) -> dict[str, str]:
    listed = json.loads(node.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json"))
    return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in listed["items"]}


def _operator_pods(node: Node) -> dict[str, str]:
    return _uids(node, OPERATOR_NAMESPACE, "app.kubernetes.io/component=operator")


def test_helm_upgrade_replaces_the_operator_and_leaves_the_brokers_running(
    one_node: Node, brokers: Brokers
) -> None:
    before, operator_before = (
        _uids(one_node, brokers.namespace, brokers.selector),
        _operator_pods(one_node),
    )
    one_node.helm(
        "upgrade", RELEASE, str(CHART), "--reuse-values", "--wait",
        "--set", "operator.resources.requests.cpu=60m",
    )  # fmt: skip
    one_node.kubectl("rollout", "status", "-n", OPERATOR_NAMESPACE, OPERATOR, "--timeout=180s")

    operator_after = _operator_pods(one_node)
    assert operator_after.keys().isdisjoint(operator_before.keys()), operator_after
    requests = one_node.kubectl(
        "get", OPERATOR, "-n", OPERATOR_NAMESPACE,
        "-o", "jsonpath={.spec.template.spec.containers[0].resources.requests.cpu}",
    )  # fmt: skip
    assert requests == "60m"
    for crd in CRDS:
        one_node.kubectl("get", "crd", crd)
    # The new operator found the cluster as it was: nothing to roll.
    one_node.wait(brokers.namespace, "--for=condition=Ready", f"tierlogcluster/{brokers.name}")
    assert _uids(one_node, brokers.namespace, brokers.selector) == before


def test_helm_uninstall_keeps_the_crds_and_the_brokers_serving_and_install_takes_them_back(
    one_node: Node, brokers: Brokers
) -> None:
    make_topic(one_node, brokers, "kept")
    before = _uids(one_node, brokers.namespace, brokers.selector)

    one_node.helm("uninstall", RELEASE, "--wait")
    try:
        assert not one_node.kubectl("get", "deployments", "-n", OPERATOR_NAMESPACE, "-o", "name")
        for crd in CRDS:
            one_node.kubectl("get", "crd", crd)  # kept (helm.sh/resource-policy: keep)...
        one_node.kubectl("get", "tierlogcluster", brokers.name, "-n", brokers.namespace)
        one_node.kubectl("get", "tierlogtopic", "kept", "-n", brokers.namespace)  # ...and so these
        # No operator: the brokers it started serve on, the same pods.
        script = f"{produce_records('kept')} && {count_records('kept')}"
        output = run_job(one_node, brokers, "produce-unmanaged", script)
        assert output.strip().splitlines()[-1] == str(RECORDS), one_node.story(brokers.namespace)
        assert _uids(one_node, brokers.namespace, brokers.selector) == before
    finally:
        one_node.install_operator()  # the session's operator, back for the modules after

    one_node.wait(brokers.namespace, "--for=condition=Ready", f"tierlogcluster/{brokers.name}")
    one_node.wait(brokers.namespace, "--for=condition=Ready", "tierlogtopic/kept")
    assert _uids(one_node, brokers.namespace, brokers.selector) == before
