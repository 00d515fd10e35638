"""What the chart tells the operator, read by the operator's own parser: the brokers a
cluster gets from an install are rendered with exactly that configuration, and their
NetworkPolicy admits the operator pod the chart renders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.charts.helm import CHART, FULL_VALUES, Rendered, helm, template, write_values
from tierlog.operator.config import OperatorConfig
from tierlog.operator.main import parse_args
from tierlog.operator.render.common import Owner
from tierlog.operator.render.policy import network_policy
from tierlog.operator.render.statefulset import stateful_set
from tierlog.operator.spec import ClusterSpec

pytestmark = pytest.mark.go_tools  # helm renders the chart

pytestmark = pytest.mark.go_tools  # helm renders the chart


def operator_config(deployment: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> OperatorConfig:
    """The configuration the rendered operator container starts with: its environment
    (the downward API's fields resolved as the kubelet would) and its arguments."""
    pod = deployment["spec"]["template"]
    fields = {
        "metadata.name": f"{deployment['metadata']['name']}-5d8f7-x2x9q",
        "metadata.namespace": deployment["metadata"]["namespace"],
    }
    [container] = pod["spec"]["containers"]
    for variable in container["env"]:
        if "valueFrom" in variable:
            value = fields[variable["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            value = variable["value"]
        monkeypatch.setenv(variable["name"], value)
    return OperatorConfig.from_args(parse_args(container["args"]))


def broker_pod_spec(config: OperatorConfig, **spec: Any) -> dict[str, Any]:
    body = {"metadata": {"name": "demo", "namespace": "apps", "uid": "u"}, "spec": spec}
    cluster = ClusterSpec.from_resource(body, config.broker_image)
    pod: dict[str, Any] = stateful_set(cluster, Owner("demo", "u"), 3)["spec"]["template"]["spec"]
    return pod


def test_brokers_run_the_charts_image_with_its_pull_policy_and_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = operator_config(template(tmp_path, FULL_VALUES).one("Deployment"), monkeypatch)
    pod = broker_pod_spec(config)
    [broker] = pod["containers"]
    assert broker["image"] == "registry.example/tierlog:1.2.3"
    assert broker["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]


def test_a_clusters_own_image_and_secrets_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = operator_config(template(tmp_path, FULL_VALUES).one("Deployment"), monkeypatch)
    pod = broker_pod_spec(
        config,
        image="mirror.example/tierlog:1.2.3",
        imagePullPolicy="IfNotPresent",
        imagePullSecrets=[{"name": "mirror-credentials"}],
    )
    [broker] = pod["containers"]
    assert (broker["image"], broker["imagePullPolicy"]) == (
        "mirror.example/tierlog:1.2.3",
        "IfNotPresent",
    )
    assert pod["imagePullSecrets"] == [{"name": "mirror-credentials"}]
    assert "imagePullSecrets" not in broker_pod_spec(config, imagePullSecrets=[])


def test_the_default_install_pulls_the_brokers_without_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = template(tmp_path).one("Deployment")
    config = operator_config(deployment, monkeypatch)
    pod = broker_pod_spec(config)
    assert (
        pod["containers"][0]["image"]
        == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    )
    assert "imagePullSecrets" not in pod


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector of matchLabels (all the policy uses) against an object's labels."""
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def test_the_brokers_network_policy_admits_the_charts_operator_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator calls each broker's gRPC port (drain, restart safety, topics): the
    rule must select the pod the chart renders, in the namespace it is installed in."""
    values = write_values(tmp_path / "values.yaml", FULL_VALUES)
    rendered = Rendered(
        helm("template", "streams", CHART, "--namespace", "logs-ops", "--values", values).stdout
    )
    deployment = rendered.one("Deployment")
    config = operator_config(deployment, monkeypatch)
    body = {
        "metadata": {"name": "demo", "namespace": "apps", "uid": "u"},
        "spec": {"networkPolicy": {"enabled": True}},
    }
    cluster = ClusterSpec.from_resource(body, config.broker_image)
    policy = network_policy(cluster, Owner("demo", "u"), config.peer)["spec"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    namespace_labels = {"kubernetes.io/metadata.name": "logs-ops"}  # the API server's own
    [grpc] = [
        rule for rule in policy["ingress"] if {"port": 9092, "protocol": "TCP"} in rule["ports"]
    ]
    admitting = [
        peer
        for peer in grpc["from"]
        if "namespaceSelector" in peer
        and _selects(peer["namespaceSelector"], namespace_labels)
        and _selects(peer["podSelector"], pod_labels)
    ]
    assert admitting, (grpc["from"], pod_labels)
    assert {"port": 19092, "protocol": "TCP"} in grpc["ports"]  # Kafka's, from the same peers
    # ...and no other namespace's pods with the same labels
    for peer in admitting:
        assert not _selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": "apps"})
