"""The CRDs: files in sync with their source, accepted and enforced by a real API server."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.operator.conftest import CRD_DIR, EXAMPLES_DIR, REPO
from tests.support.kube import ControlPlane
from tierlog.operator import crds
from tierlog.operator.spec import kafka_value
from tierlog.storage.config import LogConfig


def test_committed_crd_files_match_their_source() -> None:
    rendered = crds.render_crds()
    for directory in crds.CRD_DIRS:
        committed = {path.name: path.read_text() for path in (REPO / directory).glob("*.yaml")}
        committed.pop("kustomization.yaml", None)
        assert committed == rendered, f"{directory} drifted: run `make crds`"


def test_kustomization_lists_every_crd() -> None:
    kustomization = yaml.safe_load((CRD_DIR / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(crds.render_crds())


def test_every_topic_config_is_a_typed_property() -> None:
    properties = crds.topic_config_schema("")["properties"]
    assert set(properties) == set(LogConfig.keys())
    assert properties["retention.ms"]["type"] == "integer"
    assert properties["retention.ms"]["minimum"] == -1
    assert properties["min.cleanable.dirty.ratio"]["type"] == "number"
    assert properties["preallocate"]["type"] == "boolean"
    assert properties["cleanup.policy"]["enum"] == [
        "delete",
        "compact",
        "compact,delete",
        "delete,compact",
    ]


def test_log_defaults_use_broker_names_and_leave_flushing_to_fsync() -> None:
    properties = crds.log_defaults_schema()["properties"]
    assert "log.retention.ms" in properties
    assert "retention.ms" not in properties
    assert "log.flush.interval.ms" not in properties
    assert "log.flush.interval.messages" not in properties


def test_schemas_are_structural_every_node_has_a_type() -> None:
    def walk(node: dict[str, Any], where: str) -> None:
        assert "type" in node or node.get("x-kubernetes-int-or-string"), where
        for name, child in node.get("properties", {}).items():
            walk(child, f"{where}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{where}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{where}{{}}")

    for crd in (crds.cluster_crd(), crds.topic_crd()):
        walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], crd["spec"]["names"]["kind"])


# --- against the real API server ------------------------------------------------------------


def _apply(plane: ControlPlane, namespace: str, document: dict[str, Any]) -> Any:
    return plane.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(document), check=False
    )


def _cluster(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogCluster",
        "metadata": {"name": name},
        "spec": spec,
    }


def _topic(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogTopic",
        "metadata": {"name": name},
        "spec": {"cluster": "demo", **spec},
    }


def test_the_example_topics_have_configs_a_broker_accepts() -> None:
    """The API server checks each config's name and type; a broker checks them together
    (e.g. min.cleanable.dirty.ratio within [0, 1]): the topic operator would fail there."""
    for example in sorted(EXAMPLES_DIR.glob("*.yaml")):
        for document in yaml.safe_load_all(example.read_text()):
            if document and document["kind"] == "TierlogTopic":
                configs = document["spec"].get("config") or {}
                LogConfig.from_properties({key: kafka_value(v) for key, v in configs.items()})


@pytest.mark.slow
def test_the_examples_are_accepted(kube: ControlPlane) -> None:
    namespace = kube.create_namespace("examples")
    for example in sorted(EXAMPLES_DIR.glob("*.yaml")):
        kube.kubectl("apply", "-n", namespace, "-f", str(example))
    events = kube.get_json("tierlogcluster", "events", "-n", namespace)
    assert events["spec"]["logDefaults"]["log.retention.ms"] == 604800000
    assert (
        events["spec"]["tier"]["s3"]["credentialsSecret"]["accessKeyIdKey"] == "AWS_ACCESS_KEY_ID"
    )
    topic = kube.get_json("tierlogtopic", "orders", "-n", namespace)
    assert topic["spec"]["config"]["remote.storage.enable"] is True


@pytest.mark.slow
def test_the_server_fills_in_defaults(kube: ControlPlane) -> None:
    namespace = kube.create_namespace("defaults")
    assert _apply(kube, namespace, _cluster("bare")).returncode == 0
    spec = kube.get_json("tierlogcluster", "bare", "-n", namespace)["spec"]
    assert spec["brokers"] == 3
    # the brokers' image is the operator's (the chart's) unless a cluster names one
    assert "image" not in spec and "imagePullPolicy" not in spec
    assert spec["fsync"] == {"policy": "interval", "intervalMs": 1000}
    assert spec["storage"] == {"size": "10Gi"}
    assert spec["deletionPolicy"] == "Retain"
    assert spec["metrics"]["serviceMonitor"]["enabled"] is False
    assert spec["networkPolicy"]["enabled"] is False


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({"brokers": 0}, "spec.brokers"),
        ({"brokers": 65}, "spec.brokers"),
        ({"brokers": "three"}, "spec.brokers"),
        ({"replicas": 3}, 'unknown field "spec.replicas"'),
        ({"logDefaults": {"log.retention.ms": "forever"}}, "log.retention.ms"),
        ({"logDefaults": {"retention.ms": 1000}}, 'unknown field "spec.logDefaults.retention.ms"'),
        ({"logDefaults": {"log.flush.interval.ms": 5}}, "log.flush.interval.ms"),
        ({"logDefaults": {"compression.type": "brotli"}}, "compression.type"),
        ({"fsync": {"policy": "sometimes"}}, "spec.fsync.policy"),
        ({"tier": {"url": "ftp://bucket"}}, "spec.tier.url"),
        ({"tier": {"s3": {}}}, "spec.tier.url"),
        (
            {"tier": {"url": "file:///var/lib/tierlog/tier"}},
            "a file:// tier must be on a volume every broker shares",
        ),
        (
            {"tier": {"url": "s3://bucket/p", "sharedVolume": {"claimName": "nfs"}}},
            "tier.sharedVolume is for a file:// tier only",
        ),
        ({"tier": {"url": "s3://bucket/p", "cache": {"size": "1.5Gi"}}}, "spec.tier.cache.size"),
        ({"tier": {"url": "s3://bucket/p", "cache": {"size": "0Gi"}}}, "spec.tier.cache.size"),
        ({"tier": {"url": "s3://bucket/p", "cache": {"size": "-10Gi"}}}, "spec.tier.cache.size"),
        ({"tier": {"url": "s3://bucket/p", "cache": {"size": "100Ki"}}}, "spec.tier.cache.size"),
        ({"tier": {"url": "s3://bucket/p", "cache": {}}}, "spec.tier.cache.size"),
        ({"deletionPolicy": "Shred"}, "spec.deletionPolicy"),
        ({"storage": {"size": "ten gigs"}}, "spec.storage.size"),
        ({"tls": {"clientAuth": "none"}}, "spec.tls.secretName"),
        ({"tls": {"secretName": "t", "clientAuth": "maybe"}}, "spec.tls.clientAuth"),
        (
            {"tls": {"secretName": "t", "clientAuth": "required"}},
            "clientAuth: required needs operatorClientSecret",
        ),
        ({"authentication": {"tokenSecret": {"key": "token"}}}, "spec.authentication"),
        ({"serviceAccountName": "Not_A_Name"}, "spec.serviceAccountName"),
        (
            {"brokers": 2, "replication": {"factor": 3}},
            "replication.factor cannot exceed brokers",
        ),
        (
            {"replication": {"factor": 2, "minInsyncReplicas": 3}},
            "minInsyncReplicas cannot exceed factor",
        ),
        ({"replication": {"factor": 0}}, "spec.replication.factor"),
    ],
)
def test_invalid_clusters_are_rejected(
    kube: ControlPlane, spec: dict[str, Any], complaint: str
) -> None:
    namespace = kube.create_namespace("invalid")
    done = _apply(kube, namespace, _cluster("bad", **spec))
    assert done.returncode != 0, f"accepted: {spec}"
    assert complaint in done.stderr, done.stderr


@pytest.mark.slow
def test_tls_token_and_service_account_are_accepted_with_their_defaults(
    kube: ControlPlane,
) -> None:
    namespace = kube.create_namespace("secured")
    spec = {
        "tls": {"secretName": "demo-tls", "trustedCASecret": {"name": "clients"}},
        "authentication": {"tokenSecret": {"name": "demo-token"}},
        "serviceAccountName": "demo-brokers",
    }
    done = _apply(kube, namespace, _cluster("secured", **spec))
    assert done.returncode == 0, done.stderr
    stored = kube.get_json("tierlogcluster", "secured", "-n", namespace)["spec"]
    assert stored["tls"] == {
        "secretName": "demo-tls",
        "clientAuth": "none",
        "trustedCASecret": {"name": "clients", "key": "ca.crt"},
    }
    assert stored["authentication"] == {"tokenSecret": {"name": "demo-token", "key": "token"}}
    assert stored["serviceAccountName"] == "demo-brokers"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({"partitions": 0}, "spec.partitions"),
        ({"config": {"retention.ms": "a week"}}, "spec.config.retention.ms"),
        ({"config": {"retention.msx": 5}}, 'unknown field "spec.config.retention.msx"'),
        ({"config": {"min.cleanable.dirty.ratio": "half"}}, "min.cleanable.dirty.ratio"),
        ({"topicName": "a/b"}, "spec.topicName"),
        ({"topicName": ".."}, "not . or .."),
    ],
)
def test_invalid_topics_are_rejected(
    kube: ControlPlane, spec: dict[str, Any], complaint: str
) -> None:
    namespace = kube.create_namespace("invalid")
    done = _apply(kube, namespace, _topic("bad", **spec))
    assert done.returncode != 0, f"accepted: {spec}"
    assert complaint in done.stderr, done.stderr


@pytest.mark.slow
def test_a_file_tier_on_a_shared_volume_is_accepted(kube: ControlPlane) -> None:
    namespace = kube.create_namespace("shared")
    tier = {"url": "file:///srv/tier", "sharedVolume": {"claimName": "nfs-tier"}}
    done = _apply(kube, namespace, _cluster("shared", tier=tier))
    assert done.returncode == 0, done.stderr


def test_a_replicated_cluster_may_restore_from_its_tier(kube: ControlPlane) -> None:
    namespace = kube.create_namespace("restore")
    tier = {"url": "s3://bucket/p", "restore": True}
    done = _apply(kube, namespace, _cluster("restore", tier=tier, replication={"factor": 3}))
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_a_topic_cannot_lose_partitions_or_move(kube: ControlPlane) -> None:
    namespace = kube.create_namespace("topics")
    assert _apply(kube, namespace, _topic("t", partitions=4)).returncode == 0
    grown = _apply(kube, namespace, _topic("t", partitions=6))
    assert grown.returncode == 0, grown.stderr
    shrunk = _apply(kube, namespace, _topic("t", partitions=2))
    assert "partitions can only grow" in shrunk.stderr
    moved = _apply(
        kube,
        namespace,
        {**_topic("t", partitions=6), "spec": {"cluster": "other", "partitions": 6}},
    )
    assert "cannot change once set" in moved.stderr


@pytest.mark.slow
def test_the_scale_subresource_sets_brokers(kube: ControlPlane) -> None:
    namespace = kube.create_namespace("scale")
    assert _apply(kube, namespace, _cluster("scaled", brokers=3)).returncode == 0
    kube.kubectl("scale", "-n", namespace, "tierlogcluster/scaled", "--replicas=5")
    assert kube.get_json("tierlogcluster", "scaled", "-n", namespace)["spec"]["brokers"] == 5


@pytest.mark.slow
def test_printer_columns_show_brokers(kube: ControlPlane) -> None:
    namespace = kube.create_namespace("columns")
    assert _apply(kube, namespace, _cluster("shown", brokers=2)).returncode == 0
    table = kube.kubectl("get", "-n", namespace, "tierlogclusters").stdout
    header, row = table.splitlines()[:2]
    assert header.split()[:3] == ["NAME", "BROKERS", "READY"]
    assert row.split()[:2] == ["shown", "2"]


@pytest.mark.slow
def test_storage_cannot_change_once_the_cluster_exists(kube: ControlPlane) -> None:
    """It is the StatefulSet's volumeClaimTemplates, which Kubernetes keeps as created."""
    namespace = kube.create_namespace("storage")
    made = _apply(kube, namespace, _cluster("held", brokers=1, storage={"size": "10Gi"}))
    assert made.returncode == 0, made.stderr
    for storage in ({"size": "20Gi"}, {"size": "10Gi", "storageClassName": "fast"}):
        changed = _apply(kube, namespace, _cluster("held", brokers=1, storage=storage))
        assert changed.returncode != 0, f"accepted: {storage}"
        assert "storage (size, storageClassName) cannot change" in changed.stderr
        assert "expand each PersistentVolumeClaim data-NAME-N" in changed.stderr
    # storage left out: the server's default is the size it has; other fields still change
    grown = _apply(kube, namespace, _cluster("held", brokers=3))
    assert grown.returncode == 0, grown.stderr
    spec = kube.get_json("tierlogcluster", "held", "-n", namespace)["spec"]
    assert (spec["brokers"], spec["storage"]) == (3, {"size": "10Gi"})


@pytest.mark.slow
def test_a_tier_cache_cannot_be_added_removed_or_changed_once_the_cluster_exists(
    kube: ControlPlane,
) -> None:
    """It is a volumeClaimTemplate of the brokers, which Kubernetes keeps as created."""
    namespace = kube.create_namespace("tiercache")
    cache = {"size": "20Gi", "storageClassName": "local"}
    made = _apply(kube, namespace, _cluster("c", tier={"url": "s3://bucket/p", "cache": cache}))
    assert made.returncode == 0, made.stderr
    for tier in (
        {"url": "s3://bucket/p", "cache": {"size": "40Gi", "storageClassName": "local"}},
        {"url": "s3://bucket/p", "cache": {"size": "20Gi"}},
        {"url": "s3://bucket/p"},
    ):
        changed = _apply(kube, namespace, _cluster("c", tier=tier))
        assert changed.returncode != 0, f"accepted: {tier}"
        assert "tier.cache (size, storageClassName) cannot be added" in changed.stderr
    plain = _apply(kube, namespace, _cluster("p", tier={"url": "s3://bucket/p"}))
    assert plain.returncode == 0, plain.stderr
    added = _apply(kube, namespace, _cluster("p", tier={"url": "s3://bucket/p", "cache": cache}))
    assert "tier.cache (size, storageClassName) cannot be added" in added.stderr
    kept = _apply(
        kube, namespace, _cluster("c", brokers=5, tier={"url": "s3://bucket/p", "cache": cache})
    )
    assert kept.returncode == 0, kept.stderr


@pytest.mark.slow
def test_replication_has_defaults_and_stays_as_created(kube: ControlPlane) -> None:
    """Its topics' state is in the API server, not on the brokers alone: switching it on or
    off would strand it."""
    namespace = kube.create_namespace("replication")
    made = _apply(kube, namespace, _cluster("repl", replication={}))
    assert made.returncode == 0, made.stderr
    spec = kube.get_json("tierlogcluster", "repl", "-n", namespace)["spec"]
    assert spec["replication"] == {"factor": 3, "minInsyncReplicas": 2, "autoLeaderRebalance": True}
    off = _apply(kube, namespace, _cluster("repl"))
    assert "replication cannot be switched on or off" in off.stderr
    assert _apply(kube, namespace, _cluster("plain")).returncode == 0
    on = _apply(kube, namespace, _cluster("plain", replication={"factor": 1}))
    assert "replication cannot be switched on or off" in on.stderr
    scaled = kube.kubectl(
        "scale", "-n", namespace, "tierlogcluster/repl", "--replicas=2", check=False
    )
    assert "replication.factor cannot exceed brokers" in scaled.stderr
