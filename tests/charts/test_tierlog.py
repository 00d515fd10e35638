"""charts/tierlog, rendered and linted by the real Helm (no cluster needed here).

What the chart promises: CRDs as templates (upgradable) kept on uninstall, a locked-down
operator Deployment, RBAC that names each resource and verb the operator uses, values
checked by a closed schema, dashboards and alert rules from the same files as deploy/.
Installing into a real API server is test_tierlog_install.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.charts.helm import CHART, FULL_VALUES, helm, template, write_values
from tierlog.operator.spec import CACHE_SIZE_PATTERN

pytestmark = pytest.mark.go_tools  # helm renders the chart

REPO = CHART.parents[1]
CRD_FILES = sorted((CHART / "files" / "crds").glob("*.yaml"))
DASHBOARD_FILES = sorted((CHART / "files" / "dashboards").glob("*.json"))
RULES_FILE = CHART / "files" / "prometheus" / "tierlog.rules.yaml"

# The chart's files/ and deploy/ hold the same bytes: (chart copy, deploy copy).
SAME_BYTES = [
    *((path, REPO / "deploy" / "dashboards" / path.name) for path in DASHBOARD_FILES),
    (RULES_FILE, REPO / "deploy" / "prometheus" / RULES_FILE.name),
    *((path, REPO / "deploy" / "base" / "crds" / path.name) for path in CRD_FILES),
]


def test_helm_lint_strict_passes_with_default_and_full_values(tmp_path: Path) -> None:
    helm("lint", "--strict", CHART)
    helm("lint", "--strict", CHART, "--values", write_values(tmp_path / "full.yaml", FULL_VALUES))


def test_defaults_render_the_operator_its_rbac_crds_and_dashboards(tmp_path: Path) -> None:
    rendered = template(tmp_path)
    assert rendered.kinds() == sorted(
        ["CustomResourceDefinition"] * len(CRD_FILES)
        + ["ConfigMap"] * len(DASHBOARD_FILES)
        + ["ClusterRole", "ClusterRoleBinding", "Deployment", "Service", "ServiceAccount"]
    )
    for doc in rendered.documents:
        if doc["kind"] not in {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}:
            assert doc["metadata"]["namespace"] == "tierlog-system", doc["kind"]


def test_full_values_add_the_service_monitor_and_the_prometheus_rule(tmp_path: Path) -> None:
    rendered = template(tmp_path, FULL_VALUES)
    monitor = rendered.one("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    # honorLabels: the desired-brokers gauge keeps its cluster's namespace.
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "honorLabels": True, "interval": "15s"}
    ]
    service = rendered.one("Service")
    assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert service["spec"]["ports"][0]["port"] == 9200
    rule = rendered.one("PrometheusRule")
    assert rule["spec"] == yaml.safe_load(RULES_FILE.read_text())  # the rule file's groups


def _rules_by_name(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in spec["groups"] for rule in group["rules"]}


def test_the_consumer_lag_alert_takes_its_threshold_and_for_from_the_values(
    tmp_path: Path,
) -> None:
    metrics = FULL_VALUES["metrics"]
    lag = {"threshold": 250000, "for": "1h"}
    values = {
        **FULL_VALUES,
        "metrics": {**metrics, "prometheusRule": {**metrics["prometheusRule"], "consumerLag": lag}},
    }
    rendered = _rules_by_name(template(tmp_path, values).one("PrometheusRule")["spec"])
    written = _rules_by_name(yaml.safe_load(RULES_FILE.read_text()))
    alert = rendered.pop("TierlogConsumerLagHigh")
    default = written.pop("TierlogConsumerLagHigh")
    assert default["expr"].rstrip().endswith(") > 10000")
    assert alert["expr"] == default["expr"].replace(") > 10000", ") > 250000")
    assert alert["for"] == "1h"
    assert {**alert, "expr": default["expr"], "for": default["for"]} == default
    assert rendered == written  # every other rule as the file has it


def test_the_crds_are_templates_from_files_crds_kept_on_uninstall(tmp_path: Path) -> None:
    crds = template(tmp_path).of_kind("CustomResourceDefinition")
    assert [crd["metadata"]["name"] for crd in crds] == [
        yaml.safe_load(path.read_text())["metadata"]["name"] for path in CRD_FILES
    ]
    for crd, path in zip(crds, CRD_FILES, strict=True):
        source = yaml.safe_load(path.read_text())
        assert crd["spec"] == source["spec"]  # as written, not re-serialized
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert not (CHART / "crds").exists()  # Helm's crds/ folder is never upgraded

    not_kept = template(tmp_path, {"crds": {"keep": False}}).of_kind("CustomResourceDefinition")
    for crd in not_kept:
        assert "helm.sh/resource-policy" not in crd["metadata"].get("annotations", {})
    assert (
        template(tmp_path, {"crds": {"install": False}}).of_kind("CustomResourceDefinition") == []
    )


def test_the_cluster_crd_offers_a_tier_cache_volume_with_its_size_checked(tmp_path: Path) -> None:
    """``spec.tier.cache`` (size, storageClassName) reaches a chart install: sizes the
    operator can turn into a byte limit only, fixed once the cluster exists."""
    (cluster,) = [
        crd
        for crd in template(tmp_path).of_kind("CustomResourceDefinition")
        if crd["metadata"]["name"] == "tierlogclusters.tierlog.io"
    ]
    spec = cluster["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    cache = spec["properties"]["tier"]["properties"]["cache"]
    assert set(cache["properties"]) == {"size", "storageClassName"}
    assert cache["required"] == ["size"]
    assert cache["properties"]["size"]["pattern"] == CACHE_SIZE_PATTERN
    assert [rule["rule"] for rule in cache["x-kubernetes-validations"]] == ["self == oldSelf"]
    assert any("tier.cache" in rule["rule"] for rule in spec["x-kubernetes-validations"])


def test_the_operator_runs_non_root_read_only_with_probes_and_resources(tmp_path: Path) -> None:
    deployment = template(tmp_path, FULL_VALUES).one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"metrics": 9200, "health": 8081}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["resources"] == FULL_VALUES["operator"]["resources"]
    assert container["image"] == "registry.example/tierlog:1.2.3"
    assert container["command"] == ["tierlog-operator"]
    assert "--namespace=team-a" in container["args"] and "--namespace=team-b" in container["args"]
    assert "--all-namespaces" not in container["args"]
    assert {"name": "TZ", "value": "UTC"} in container["env"]
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert mounts == {"/tmp"}  # the only writable path
    assert pod["serviceAccountName"] == "tierlog-operator"
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["tolerations"] == FULL_VALUES["operator"]["tolerations"]
    assert deployment["spec"]["replicas"] == 2

    default = template(tmp_path).one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--all-namespaces" in default["args"]
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert default["image"] == f"ghcr.io/tierlog/tierlog:{app_version}"


def _grants(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def test_rbac_grants_what_the_operator_uses_and_nothing_more(tmp_path: Path) -> None:
    rendered = template(tmp_path)
    grants = _grants(rendered.one("ClusterRole"))
    apply = {"get", "create", "patch"}  # server-side apply, and reading back
    watched = {"list", "watch"}  # a change wakes its cluster's pass
    expected: dict[tuple[str, str], set[str]] = {
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
        ("", "namespaces"): {"list", "watch"},
        ("kopf.dev", "clusterkopfpeerings"): {"get", "list", "watch", "create", "patch"},
        ("kopf.dev", "kopfpeerings"): {"get", "list", "watch", "create", "patch"},
        ("apps", "statefulsets"): apply | watched,
        ("", "services"): apply,
        ("", "configmaps"): apply | watched | {"update", "delete"},  # a deleted topic's parts
        ("coordination.k8s.io", "leases"): {"get", "list", "create", "update"},
        ("", "nodes"): {"get"},
        ("", "serviceaccounts"): apply,
        ("rbac.authorization.k8s.io", "roles"): apply,
        ("rbac.authorization.k8s.io", "rolebindings"): apply,
        ("policy", "poddisruptionbudgets"): apply,
        ("networking.k8s.io", "networkpolicies"): apply | {"delete"},
        ("monitoring.coreos.com", "servicemonitors"): apply | {"delete"},
        ("", "pods"): watched | {"delete"},
        ("", "secrets"): apply | {"update"},  # the brokers' SCRAM credentials Secret
        ("", "events"): {"create"},
    }
    for path in CRD_FILES:
        crd = yaml.safe_load(path.read_text())
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        if group == "kopf.dev":  # kopf's peering, granted above
            continue
        expected[(group, plural)] = {"get", "list", "watch", "patch"}
        expected[(group, f"{plural}/status")] = {"patch"}
        expected[(group, f"{plural}/finalizers")] = {"update"}
    assert grants == expected
    binding = rendered.one("ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "tierlog", "namespace": "tierlog-system"}
    ]
    assert template(tmp_path, {"rbac": {"create": False}}).of_kind("ClusterRole") == []


def test_dashboards_are_configmaps_labelled_for_grafana_with_the_files_bytes(
    tmp_path: Path,
) -> None:
    maps = template(tmp_path, FULL_VALUES).of_kind("ConfigMap")
    by_key = {key: (cm, value) for cm in maps for key, value in cm["data"].items()}
    assert sorted(by_key) == [path.name for path in DASHBOARD_FILES]
    for path in DASHBOARD_FILES:
        configmap, text = by_key[path.name]
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert configmap["metadata"]["annotations"] == {"grafana_folder": "tierlog"}
        assert text == path.read_text().rstrip("\n")
        assert json.loads(text)["uid"] == path.stem
    assert template(tmp_path, {"dashboards": {"enabled": False}}).of_kind("ConfigMap") == []


@pytest.mark.parametrize(
    "values",
    [
        {"replicaCount": 2},  # a top-level typo
        {"operator": {"replicass": 2}},
        {"metrics": {"serviceMonitor": {"enabled": True, "intervall": "10s"}}},
        {"operator": {"resources": {"limits": {"memroy": "1Gi"}}}},
        {"operator": {"tolerations": [{"key": "a", "effect": "NoSchedule", "valeu": "x"}]}},
    ],
    ids=["top-level", "operator", "service-monitor", "resources", "toleration"],
)
def test_the_values_schema_rejects_unknown_keys(tmp_path: Path, values: dict[str, Any]) -> None:
    done = helm(
        "template", "tierlog", CHART, "--values", write_values(tmp_path / "bad.yaml", values),
        check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert (
        "additional properties" in done.stderr.lower()
        or "additionalproperties" in done.stderr.lower()
    ), done.stderr


def test_the_values_schema_rejects_wrong_types(tmp_path: Path) -> None:
    done = helm("template", "tierlog", CHART, "--set", "operator.metricsPort=http", check=False)
    assert done.returncode != 0 and "metricsPort" in done.stderr


def _objects(schema: Any, where: str = "") -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(schema, dict):
        return []
    found = [(where, schema)] if schema.get("type") == "object" else []
    for key, value in schema.items():
        if isinstance(value, dict):
            found += _objects(value, f"{where}/{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                found += _objects(item, f"{where}/{key}/{index}")
    return found


def test_every_object_in_the_schema_is_closed_or_a_declared_map() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    for where, obj in _objects(schema):
        if "properties" in obj:
            assert obj.get("additionalProperties") is False, where
        elif isinstance(obj.get("additionalProperties"), dict):
            continue  # a map: labels, annotations, nodeSelector (names to strings)
        else:  # a Kubernetes type passed through as the API defines it
            assert "Kubernetes API" in obj.get("description", ""), where


def test_values_yaml_documents_every_key_the_schema_allows() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def keys(node: Any, prefix: str = "") -> set[str]:
        if not isinstance(node, dict):
            return set()
        return {f"{prefix}{k}" for k in node} | {
            key for k, v in node.items() for key in keys(v, f"{prefix}{k}.")
        }

    def schema_keys(node: dict[str, Any], prefix: str = "") -> set[str]:
        found = set()
        for name, sub in node.get("properties", {}).items():
            found.add(f"{prefix}{name}")
            if "properties" in sub and "$ref" not in sub:
                found |= schema_keys(sub, f"{prefix}{name}.")
        return found

    assert schema_keys(schema) <= keys(values)


@pytest.mark.parametrize("pair", SAME_BYTES, ids=lambda pair: pair[0].name)
def test_the_chart_and_deploy_hold_the_same_bytes(pair: tuple[Path, Path]) -> None:
    chart_copy, deploy_copy = pair
    assert chart_copy.read_bytes() == deploy_copy.read_bytes(), (
        f"{chart_copy.relative_to(REPO)} and {deploy_copy.relative_to(REPO)} differ: "
        "edit one, copy it over the other"
    )
