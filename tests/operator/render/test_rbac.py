"""A replicated cluster's brokers: their ServiceAccount, and a Role on their partition
state only (tests/operator/test_partition_controller.py runs real brokers with it)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

from tests.support.kube import ControlPlane
from tierlog.broker.scram_credentials import CredentialChange, ScramCredentials, ScramMechanism
from tierlog.operator.render.common import Owner
from tierlog.operator.render.configmap import sidecar_properties
from tierlog.operator.render.rbac import (
    broker_service_account,
    partition_state_role,
    partition_state_role_binding,
    scram_credentials_secret,
)
from tierlog.operator.render.statefulset import stateful_set
from tierlog.operator.spec import ClusterSpec
from tierlog.partition_state.kube_store import KubeStateStore
from tierlog.replication.config import KubernetesStore
from tierlog.sidecar.config import SidecarConfig

from .conftest import resource


def _replicated(**spec: object) -> ClusterSpec:
    return ClusterSpec.from_resource(resource(**{"replication": {"factor": 3}, **spec}))


def test_the_brokers_may_keep_their_configmaps_and_leases_and_nothing_else(owner: Owner) -> None:
    """A topic's partition state is ConfigMaps named after it, unknown to the Role: the
    namespace's ConfigMaps are granted, the Leases by name, and of the Secrets only the
    one of users' SCRAM credentials, by name and not created (the operator does)."""
    role = partition_state_role(_replicated(brokers=2), owner, 3)  # one leaving
    assert role["metadata"]["name"] == "events-partition-state"
    named = {
        (rule["resources"][0], verb): tuple(rule.get("resourceNames", ("*",)))
        for rule in role["rules"]
        for verb in rule["verbs"]
    }
    assert named == {
        ("configmaps", "get"): ("*",),
        ("configmaps", "list"): ("*",),
        ("configmaps", "watch"): ("*",),  # followed by change (kube_watch), not by polls
        ("configmaps", "create"): ("*",),
        ("configmaps", "update"): ("*",),
        ("configmaps", "delete"): ("*",),
        ("secrets", "get"): ("events-scram-credentials",),
        ("secrets", "update"): ("events-scram-credentials",),
        ("leases", "create"): ("*",),
        ("leases", "list"): ("*",),  # by label, which RBAC cannot restrict
        ("leases", "get"): ("events-broker-0", "events-broker-1", "events-broker-2"),
        ("leases", "update"): ("events-broker-0", "events-broker-1", "events-broker-2"),
    }


def test_the_operator_creates_the_scram_credentials_secret_empty() -> None:
    """Applied at every pass: without ``data`` it never overwrites the brokers' writes;
    without an owner it outlives the cluster, as the partition state does."""
    secret = scram_credentials_secret(_replicated())
    assert secret["kind"] == "Secret" and secret["type"] == "Opaque"
    assert "data" not in secret and "stringData" not in secret
    assert secret["metadata"]["name"] == "events-scram-credentials"
    assert secret["metadata"]["labels"]["tierlog.io/cluster"] == "events"
    assert "ownerReferences" not in secret["metadata"]


def test_the_brokers_run_as_their_own_account_unless_the_spec_names_one(owner: Owner) -> None:
    own = _replicated()
    account = broker_service_account(own, owner)
    assert account is not None and account["metadata"]["name"] == "events-broker"
    pod = stateful_set(own, owner, 3)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "events-broker"
    binding = partition_state_role_binding(own, owner)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "events-broker", "namespace": "prod"}
    ]
    assert binding["roleRef"]["name"] == "events-partition-state"

    theirs = _replicated(serviceAccountName="s3-identity")
    assert broker_service_account(theirs, owner) is None
    assert partition_state_role_binding(theirs, owner)["subjects"][0]["name"] == "s3-identity"
    pod = stateful_set(theirs, owner, 3)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "s3-identity"


def test_an_unreplicated_cluster_keeps_the_namespaces_default_account(
    bare: ClusterSpec, owner: Owner
) -> None:
    assert broker_service_account(bare, owner) is None
    assert "serviceAccountName" not in stateful_set(bare, owner, 3)["spec"]["template"]["spec"]
    assert not any(key.startswith("tierlog.replication.") for key in sidecar_properties(bare))


def test_the_brokers_config_names_the_store_in_the_api_server() -> None:
    props = sidecar_properties(_replicated(replication={"factor": 2, "minInsyncReplicas": 1}))
    assert props["default.replication.factor"] == "2"
    assert props["min.insync.replicas"] == "1"
    config = SidecarConfig.from_properties({**props, "node.id": "1"})
    assert config.replication is not None
    assert config.replication.store == KubernetesStore("prod", "events")
    assert config.default_replication_factor == 2
    assert config.storage.default_log_config.min_insync_replicas == 1


@pytest.mark.go_tools
def test_with_the_rendered_role_a_broker_keeps_scram_credentials_and_no_other_secret(
    kube: ControlPlane, tmp_path: Path
) -> None:
    """The real API server's RBAC: a broker's account, bound to the rendered Role, reads
    and changes the operator's Secret (keeping its labels) and may neither
    read another Secret nor create one."""
    namespace = kube.create_namespace("scram")
    meta = {"name": "events", "namespace": namespace, "uid": "u-1"}
    cluster = ClusterSpec.from_resource({"metadata": meta, "spec": {"replication": {"factor": 1}}})
    owner = Owner("events", "u-1")
    account = broker_service_account(cluster, owner)
    assert account is not None
    rendered = [
        account,
        partition_state_role(cluster, owner, 1),
        partition_state_role_binding(cluster, owner),
        scram_credentials_secret(cluster),
    ]
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": rendered}),
    )
    kube.kubectl("create", "secret", "generic", "s3-keys", "--from-literal=id=x", "-n", namespace)
    broker = _client_as(kube, namespace, "events-broker", tmp_path)

    store = KubeStateStore(broker, namespace, "events")
    salted = hashlib.pbkdf2_hmac("sha256", b"secret", b"salt", 4096)
    change = CredentialChange("alice", ScramMechanism.SCRAM_SHA_256.value, 4096, b"salt", salted)
    ScramCredentials(store.scram_credentials()).apply([change])

    assert sorted(ScramCredentials(store.scram_credentials()).read()) == ["alice"]
    kept = kube.get_json("secret", "events-scram-credentials", "-n", namespace)["metadata"]
    assert kept["labels"]["app.kubernetes.io/managed-by"] == "tierlog-operator"
    with pytest.raises(ApiError) as reading:
        broker.get(Secret, "s3-keys", namespace=namespace)
    with pytest.raises(ApiError) as creating:
        broker.create(Secret(metadata=ObjectMeta(name="x", namespace=namespace)))
    assert (reading.value.status.code, creating.value.status.code) == (403, 403)


def _client_as(plane: ControlPlane, namespace: str, account: str, workdir: Path) -> Client:
    """A client holding a token of ``account``, as the kubelet gives a pod."""
    path = plane.kubeconfig_as(account, namespace, workdir)
    return Client(KubeConfig.from_file(path), field_manager="tierlog-tests")
