"""The brokers' StatefulSet: the sidecar's real flags, probes, security, volume, OnDelete."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from tests.operator.render.conftest import resource
from tierlog.operator.render.common import CONFIG_HASH_ANNOTATION, Owner
from tierlog.operator.render.configmap import properties_text, sidecar_properties
from tierlog.operator.render.statefulset import (
    CLOSE_BUDGET_S,
    desired_config_hash,
    stateful_set,
)
from tierlog.operator.spec import ClusterSpec
from tierlog.sidecar.main import build_config, parse_args
from tierlog.storage.errors import InvalidConfigError


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    containers = manifest["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def test_the_sidecar_parses_the_rendered_arguments(bare: ClusterSpec, owner: Owner) -> None:
    main = container(stateful_set(bare, owner, 3))
    assert main["command"] == ["tierlog-sidecar"]
    args = parse_args(main["args"])
    assert str(args.config_file) == "/etc/tierlog/server.properties"
    assert args.node_id_from_pod_name == "$(POD_NAME)"
    host = "$(POD_NAME).events-brokers.prod.svc"
    assert f"advertised.listeners={host}:9092,PLAINTEXT://{host}:19092" in args.config


def _kubelet_1_27_env(manifest: dict[str, Any], pod_name: str) -> dict[str, str]:
    """The container's environment as a kubelet of Kubernetes 1.27 resolves it for the
    StatefulSet's pod ``pod_name``: the pod has the template's labels and no
    ``apps.kubernetes.io/pod-index`` (1.28+); a missing label's fieldRef is empty."""
    labels = manifest["spec"]["template"]["metadata"]["labels"]
    fields = {"metadata.name": pod_name, "metadata.namespace": manifest["metadata"]["namespace"]}
    fields.update({f"metadata.labels['{key}']": value for key, value in labels.items()})
    env = {}
    for variable in container(manifest)["env"]:
        if "value" in variable:
            env[variable["name"]] = variable["value"]
            continue
        field = variable["valueFrom"].get("fieldRef")
        if field is not None:
            path = field["fieldPath"]
            assert path in fields or path.startswith("metadata.labels["), path
            env[variable["name"]] = fields.get(path, "")
    return env


def test_a_kubernetes_1_27_pod_starts_its_broker_with_the_pods_ordinal(
    bare: ClusterSpec, owner: Owner, tmp_path: Path
) -> None:
    """The chart says kubeVersion >=1.27: the id comes from the pod's name, not from the
    pod-index label that 1.27 does not set."""
    manifest = stateful_set(bare, owner, 3)
    env = _kubelet_1_27_env(manifest, "events-2")
    config_file = tmp_path / "server.properties"
    config_file.write_text(properties_text({**sidecar_properties(bare), "log.dirs": str(tmp_path)}))
    args = [  # $(VAR) expanded as Kubernetes does; the ConfigMap's file where it is mounted
        re.sub(r"\$\((\w+)\)", lambda ref: env.get(ref.group(1), ref.group(0)), arg)
        for arg in container(manifest)["args"]
    ]
    args = [f"--config-file={config_file}" if a.startswith("--config-file") else a for a in args]
    config = build_config(parse_args(args))
    assert config.node_id == 2
    assert config.advertised_listener == "events-2.events-brokers.prod.svc:9092"
    assert config.kafka_listen == "0.0.0.0:19092"
    assert config.kafka_advertised_listener == "events-2.events-brokers.prod.svc:19092"


def test_rolls_are_the_operators_on_delete(bare: ClusterSpec, owner: Owner) -> None:
    spec = stateful_set(bare, owner, 5)["spec"]
    assert spec["updateStrategy"] == {"type": "OnDelete"}
    assert spec["replicas"] == 5
    assert spec["serviceName"] == "events-brokers"


def test_probes_use_the_metrics_ports_endpoints(bare: ClusterSpec, owner: Owner) -> None:
    main = container(stateful_set(bare, owner, 3))
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    ports = {port["name"]: port["containerPort"] for port in main["ports"]}
    assert ports == {"grpc": 9092, "metrics": 9404, "kafka": 19092}


TLS = {"tls": {"secretName": "events-tls"}}
TOKENS = {"authentication": {"tokenSecret": {"name": "events-token"}}}


@pytest.mark.parametrize(
    ("spec", "protocol"),
    [({}, "PLAINTEXT"), (TLS, "SSL"), (TOKENS, "SASL_PLAINTEXT"), ({**TLS, **TOKENS}, "SASL_SSL")],
    ids=["bare", "tls", "tokens", "tls-and-tokens"],
)
def test_the_kafka_listener_secures_itself_as_the_cluster_does(
    owner: Owner, spec: dict[str, Any], protocol: str
) -> None:
    """TLS from spec.tls, SASL over the token from spec.authentication: the Kafka port is
    served whatever the cluster asks for, and is never a way around it."""
    cluster = ClusterSpec.from_resource(resource(**spec))
    main = container(stateful_set(cluster, owner, 3))
    assert {port["name"]: port["containerPort"] for port in main["ports"]}["kafka"] == 19092
    host = "$(POD_NAME).events-brokers.prod.svc"
    advertised = f"advertised.listeners={host}:9092,{protocol}://{host}:19092"
    assert advertised in parse_args(main["args"]).config
    props = sidecar_properties(cluster)
    assert props["listeners"] == f"0.0.0.0:9092,{protocol}://0.0.0.0:19092"
    sasl = props.get("sasl.enabled.mechanisms")
    every = "PLAIN,OAUTHBEARER,SCRAM-SHA-256,SCRAM-SHA-512"
    assert sasl == (every if protocol.startswith("SASL_") else None)


def test_non_root_read_only_and_a_grace_period_past_the_sidecars(
    bare: ClusterSpec, owner: Owner
) -> None:
    pod = stateful_set(bare, owner, 3)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    security = container(stateful_set(bare, owner, 3))["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    # the calls in flight get tierlog.shutdown.grace.ms, then the logs close
    grace_ms = int(sidecar_properties(bare)["tierlog.shutdown.grace.ms"])
    assert pod["terminationGracePeriodSeconds"] == grace_ms // 1000 + CLOSE_BUDGET_S
    mounts = {
        mount["mountPath"] for mount in container(stateful_set(bare, owner, 3))["volumeMounts"]
    }
    assert {"/var/lib/tierlog", "/etc/tierlog", "/tmp"} <= mounts


def test_volume_claim_template(full: ClusterSpec, owner: Owner) -> None:
    claim = stateful_set(full, owner, 4)["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["storageClassName"] == "fast"


def test_pod_overrides_apply_but_never_the_selector(full: ClusterSpec, owner: Owner) -> None:
    manifest = stateful_set(full, owner, 4)
    template = manifest["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "data"
    assert template["metadata"]["labels"]["app.kubernetes.io/instance"] == "events"
    assert template["metadata"]["annotations"]["note"] == "x"
    assert template["spec"]["priorityClassName"] == "high"
    assert template["spec"]["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert template["spec"]["affinity"] == {"nodeAffinity": {}}
    selector = manifest["spec"]["selector"]["matchLabels"]
    assert all(template["metadata"]["labels"][key] == value for key, value in selector.items())
    assert container(manifest)["resources"]["limits"] == {"memory": "2Gi"}


def test_s3_credentials_come_from_the_secret(full: ClusterSpec, owner: Owner) -> None:
    env = {item["name"]: item for item in container(stateful_set(full, owner, 4))["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "s3-keys", "key": "id"}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["key"] == (
        "AWS_SECRET_ACCESS_KEY"
    )


def test_the_config_hash_follows_config_and_template_but_not_scale(
    bare: ClusterSpec, owner: Owner
) -> None:
    base = desired_config_hash(bare)
    annotations = stateful_set(bare, owner, 3)["spec"]["template"]["metadata"]["annotations"]
    assert annotations[CONFIG_HASH_ANNOTATION] == base
    assert desired_config_hash(dataclasses.replace(bare, brokers=7)) == base
    assert (
        desired_config_hash(dataclasses.replace(bare, log_defaults={"log.retention.ms": 5})) != base
    )
    assert desired_config_hash(dataclasses.replace(bare, image="other:2")) != base


def test_a_file_tier_is_its_shared_volume_mounted_at_its_path(owner: Owner) -> None:
    tier = {"url": "file:///srv/tier", "sharedVolume": {"claimName": "nfs-tier"}}
    manifest = stateful_set(ClusterSpec.from_resource(resource(tier=tier)), owner, 3)
    pod = manifest["spec"]["template"]["spec"]
    assert {"name": "tier", "persistentVolumeClaim": {"claimName": "nfs-tier"}} in pod["volumes"]
    assert {"name": "tier", "mountPath": "/srv/tier"} in container(manifest)["volumeMounts"]


def test_a_tier_cache_is_a_volume_claim_template_of_its_own_mounted_at_the_cache(
    owner: Owner,
) -> None:
    tier = {"url": "s3://b/p", "cache": {"size": "20Gi", "storageClassName": "local-nvme"}}
    manifest = stateful_set(ClusterSpec.from_resource(resource(tier=tier)), owner, 3)
    data, cache = manifest["spec"]["volumeClaimTemplates"]
    assert data["metadata"]["name"] == "data"
    assert cache["metadata"]["name"] == "tier-cache"
    assert cache["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert cache["spec"]["storageClassName"] == "local-nvme"
    assert cache["spec"]["accessModes"] == ["ReadWriteOnce"]
    mounts = container(manifest)["volumeMounts"]
    assert {"name": "tier-cache", "mountPath": "/var/cache/tierlog"} in mounts
    plain = stateful_set(ClusterSpec.from_resource(resource(tier={"url": "s3://b/p"})), owner, 3)
    assert [claim["metadata"]["name"] for claim in plain["spec"]["volumeClaimTemplates"]] == [
        "data"
    ]
    assert all(mount["name"] != "tier-cache" for mount in container(plain)["volumeMounts"])


@pytest.mark.parametrize("size", ["0Gi", "1.5Gi", "500m", "-1Gi", "10", "10Ki", "ten"])
def test_a_tier_cache_size_the_crd_refuses_is_refused_here_too(size: str) -> None:
    with pytest.raises(InvalidConfigError, match=r"tier\.cache\.size"):
        ClusterSpec.from_resource(resource(tier={"url": "s3://b/p", "cache": {"size": size}}))
