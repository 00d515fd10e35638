"""A replicated cluster's brokers: their ServiceAccount, and a Role on their partition
state only (tests/operator/test_partition_controller.py runs real brokers with it)."""

from __future__ import annotations

from tierlog.operator.render.common import Owner
from tierlog.operator.render.configmap import sidecar_properties
from tierlog.operator.render.rbac import (
    broker_service_account,
    partition_state_role,
    partition_state_role_binding,
)
from tierlog.operator.render.statefulset import stateful_set
from tierlog.operator.spec import ClusterSpec
from tierlog.replication.config import KubernetesStore
from tierlog.sidecar.config import SidecarConfig

from .conftest import resource


def _replicated(**spec: object) -> ClusterSpec:
    return ClusterSpec.from_resource(resource(**{"replication": {"factor": 3}, **spec}))


def test_the_brokers_may_keep_their_configmaps_and_leases_and_nothing_else(owner: Owner) -> None:
    """A topic's partition state is ConfigMaps named after it, unknown to the Role: the
    namespace's ConfigMaps are granted, the Leases by name."""
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
        ("leases", "create"): ("*",),
        ("leases", "list"): ("*",),  # by label, which RBAC cannot restrict
        ("leases", "get"): ("events-broker-0", "events-broker-1", "events-broker-2"),
        ("leases", "update"): ("events-broker-0", "events-broker-1", "events-broker-2"),
    }


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
