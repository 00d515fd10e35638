"""charts/tierlog against a real kube-apiserver (with etcd, tests/support/kube.py).

The rendered manifests pass the server's own validation (Kubernetes' schemas, our CRDs,
the Prometheus Operator's CRDs for the ServiceMonitor and PrometheusRule); ``helm
install`` and ``helm upgrade`` succeed, an upgrade changes a CRD (Helm's crds/ folder
would not), ``helm uninstall`` leaves the CRDs, and the operator's ServiceAccount may do
what the operator needs and not more — and the real operator, with that account's token,
reconciles a cluster. There is no kubelet: the chart's operator pod is stored, not run.

The install tests use an API server of their own: they change cluster-wide CRDs, which
the other tests' shared server must keep as the repository has them.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.charts.helm import CHART, FULL_VALUES, helm, write_values
from tests.operator.conftest import start_operator, wait_for
from tests.support.kube import ControlPlane, start_control_plane
from tests.tools.monitoring_crds import monitoring_crd_files

pytestmark = [pytest.mark.slow, pytest.mark.go_tools]  # helm, etcd and kube-apiserver

CRD_FILES = sorted((CHART / "files" / "crds").glob("*.yaml"))
CRD_DIR = CHART.parents[1] / "deploy" / "base" / "crds"


def _install_monitoring_crds(plane: ControlPlane) -> None:
    for path in monitoring_crd_files():  # too big for client-side apply's annotation
        plane.kubectl("apply", "--server-side", "-f", str(path))
    for path in monitoring_crd_files():
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        plane.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = start_control_plane(tmp_path_factory.mktemp("chart-kube"))
    try:
        _install_monitoring_crds(plane)
        yield plane
    finally:
        plane.stop()


def _helm(plane: ControlPlane, *args: str | Path) -> str:
    return helm(*args, "--kubeconfig", plane.kubeconfig).stdout


@pytest.mark.parametrize("full", [False, True], ids=["default-values", "full-values"])
def test_the_server_accepts_every_rendered_manifest(
    plane: ControlPlane, tmp_path: Path, full: bool
) -> None:
    namespace = plane.create_namespace("render")
    args: list[str | Path] = ["template", "tierlog", CHART, "--namespace", namespace]
    if full:
        args += ["--values", write_values(tmp_path / "full.yaml", FULL_VALUES)]
    rendered = helm(*args).stdout
    done = plane.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-f", "-", input=rendered
    )
    kinds = {line.split("/")[0] for line in done.stdout.splitlines()}
    assert "customresourcedefinition.apiextensions.k8s.io" in kinds
    assert "deployment.apps" in kinds
    if full:
        assert {
            "servicemonitor.monitoring.coreos.com",
            "prometheusrule.monitoring.coreos.com",
        } <= kinds


def _changed_chart(tmp_path: Path) -> tuple[Path, str]:
    """A copy of the chart whose TierlogCluster CRD has one more optional spec field."""
    chart = tmp_path / "tierlog"
    shutil.copytree(CHART, chart)
    path = chart / "files" / "crds" / "tierlogclusters.tierlog.io.yaml"
    crd = yaml.safe_load(path.read_text())
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["properties"]["upgradeProbe"] = {"type": "string", "description": "added by a test"}
    path.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart, crd["metadata"]["name"]


def _spec_fields(plane: ControlPlane, crd_name: str) -> set[str]:
    crd = plane.get_json("crd", crd_name)
    version = crd["spec"]["versions"][0]
    return set(version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])


def test_install_then_upgrade_updates_the_crds_and_uninstall_keeps_them(
    plane: ControlPlane, tmp_path: Path
) -> None:
    namespace = plane.create_namespace("helm")
    notes = _helm(plane, "install", "tierlog", CHART, "--namespace", namespace)
    assert "rollout status deployment/tierlog-operator" in notes  # NOTES.txt: next steps
    assert "kubectl apply -f deploy/examples/" in notes
    for path in CRD_FILES:
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        plane.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    deployment = plane.get_json("deployment", "tierlog-operator", "-n", namespace)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "tierlog-operator"
    ]

    changed, crd_name = _changed_chart(tmp_path)
    assert "upgradeProbe" not in _spec_fields(plane, crd_name)
    _helm(plane, "upgrade", "tierlog", changed, "--namespace", namespace)
    assert "upgradeProbe" in _spec_fields(plane, crd_name)
    history = _helm(plane, "history", "tierlog", "--namespace", namespace, "-o", "yaml")
    assert [entry["revision"] for entry in yaml.safe_load(history)] == [1, 2]

    _helm(plane, "uninstall", "tierlog", "--namespace", namespace)
    assert "upgradeProbe" in _spec_fields(plane, crd_name)  # kept (helm.sh/resource-policy)
    assert plane.kubectl("get", "deployment", "-n", namespace, "-o", "name").stdout == ""


def _can(plane: ControlPlane, subject: str, verb: str, resource: str, namespace: str) -> bool:
    done = plane.kubectl(
        "auth", "can-i", verb, resource, f"--as={subject}", "-n", namespace, check=False
    )
    return done.stdout.strip() == "yes"


def test_the_operator_account_may_do_what_it_needs_and_not_more(
    plane: ControlPlane,
) -> None:
    namespace = plane.create_namespace("rbac")
    _helm(plane, "install", "rbac", CHART, "--namespace", namespace, "--set", "crds.install=false")
    operator = f"system:serviceaccount:{namespace}:rbac-tierlog"
    elsewhere = plane.create_namespace("brokers")  # brokers live in any namespace
    allowed = [
        ("create", "statefulsets.apps"),
        ("patch", "statefulsets.apps"),
        ("list", "pods"),
        ("delete", "pods"),
        ("patch", "poddisruptionbudgets.policy"),
        ("delete", "servicemonitors.monitoring.coreos.com"),
        ("create", "networkpolicies.networking.k8s.io"),
        ("create", "events"),
        ("get", "secrets"),
        ("list", "customresourcedefinitions.apiextensions.k8s.io"),
        # kopf's peering: the object read and watched, each replica's keep-alive patched in
        ("create", "clusterkopfpeerings.kopf.dev"),
        ("watch", "clusterkopfpeerings.kopf.dev"),
        ("patch", "clusterkopfpeerings.kopf.dev"),
        ("create", "kopfpeerings.kopf.dev"),
        ("watch", "kopfpeerings.kopf.dev"),
        ("patch", "kopfpeerings.kopf.dev"),
        # replication: the controller, and the brokers' account, Role and binding
        ("list", "leases.coordination.k8s.io"),
        ("update", "configmaps"),
        ("create", "serviceaccounts"),
        ("create", "roles.rbac.authorization.k8s.io"),
        ("create", "rolebindings.rbac.authorization.k8s.io"),
        ("get", "nodes"),
        # replication: the SCRAM credentials Secret, applied and granted to the brokers
        ("create", "secrets"),
        ("patch", "secrets"),
        ("update", "secrets"),
    ]
    for path in CRD_FILES:
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["group"] == "kopf.dev":
            continue
        resource = f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"
        allowed += [("watch", resource), ("patch", resource), ("patch", f"{resource}/status")]
    refused = [
        ("list", "secrets"),
        ("watch", "secrets"),
        ("delete", "secrets"),
        ("create", "pods"),
        ("patch", "pods"),
        ("delete", "statefulsets.apps"),
        ("delete", "persistentvolumeclaims"),
        ("create", "deployments.apps"),
        ("escalate", "roles.rbac.authorization.k8s.io"),
        ("bind", "roles.rbac.authorization.k8s.io"),
        ("create", "clusterroles.rbac.authorization.k8s.io"),
        ("delete", "leases.coordination.k8s.io"),
        ("list", "nodes"),
        ("create", "customresourcedefinitions.apiextensions.k8s.io"),
        ("delete", "namespaces"),
    ]
    assert [(v, r) for v, r in allowed if not _can(plane, operator, v, r, elsewhere)] == []
    assert [(v, r) for v, r in refused if _can(plane, operator, v, r, elsewhere)] == []
    _helm(plane, "uninstall", "rbac", "--namespace", namespace)


# A cluster that makes the operator use every grant: its objects, an optional
# NetworkPolicy, a ServiceMonitor (the CRD is installed), status and events; with
# replication, the brokers' ServiceAccount, SCRAM credentials Secret and Role (which the
# API server grants only if the operator holds what it grants) and the controller reading
# the Leases.
ACCOUNT = "granted-tierlog"  # the chart's ServiceAccount for the release "granted"
WATCHED_CLUSTER = """
apiVersion: tierlog.io/v1alpha1
kind: TierlogCluster
metadata: {name: granted}
spec:
  brokers: 2
  networkPolicy: {enabled: true}
  metrics: {serviceMonitor: {enabled: true}}
  replication: {factor: 2, minInsyncReplicas: 1}
"""


def test_the_real_operator_works_with_the_charts_rbac_alone(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """tierlog-operator with a token of the chart's ServiceAccount (and so its RBAC alone),
    with kopf's peering on, reconciles a cluster into every object it renders."""
    plane.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(CRD_DIR))
    for path in CRD_FILES:
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        plane.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    release = plane.create_namespace("operator")
    _helm(plane, "install", "granted", CHART, "--namespace", release, "--set", "crds.install=false")
    as_operator = plane.kubeconfig_as(ACCOUNT, release, tmp_path)
    watched = plane.create_namespace("watched")
    log_path = tmp_path / "operator.log"
    running = start_operator(dataclasses.replace(plane, kubeconfig=as_operator), watched, log_path)
    try:
        plane.kubectl("apply", "-n", watched, "-f", "-", input=WATCHED_CLUSTER)

        def reconciled() -> bool:
            cluster = plane.get_json("tierlogcluster", "granted", "-n", watched)
            return bool(cluster.get("status", {}).get("observedGeneration") == 1)

        wait_for("the cluster's status", reconciled, timeout_s=120)
        for kind in (
            "statefulset",
            "service",
            "configmap",
            "poddisruptionbudget",
            "networkpolicy",
            "servicemonitor",
            "serviceaccount/granted-broker",
            "role/granted-partition-state",
            "rolebinding/granted-partition-state",
            "secret/granted-scram-credentials",
        ):
            found = plane.kubectl("get", kind, "-n", watched, "-o", "name").stdout
            assert found.strip(), f"no {kind} in {watched}:\n{running.output}"
        # the peering object created, and this replica's keep-alive patched into it
        peering = wait_for(
            "the operator in its peering object",
            lambda: plane.get_json("kopfpeering", "tierlog-operator", "-n", watched).get("status"),
        )
        assert [entry["priority"] for entry in peering.values()] == [0]
        assert "forbidden" not in running.output.lower(), running.output
    finally:
        running.stop()
    _helm(plane, "uninstall", "granted", "--namespace", release)
