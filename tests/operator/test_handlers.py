"""The operator as a process against a real API server, with real sidecars as brokers.

There is no kubelet or controller-manager in the test control plane: where pods must
exist, ``Brokers`` (conftest.py) starts real sidecars, creates their Pod objects from the
StatefulSet's template and writes their status itself. Nothing collects garbage either,
so objects a deleted cluster owned stay behind; the tests check the owner references
that would take them.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.operator.conftest import (
    Brokers,
    RunningOperator,
    shared_file_tier,
    start_operator,
    wait_for,
)
from tests.support.kube import ControlPlane
from tests.support.state_stores import open_store
from tests.tools.monitoring_crds import monitoring_crd_files
from tierlog.client import AdminClient
from tierlog.partition_state.model import PartitionState
from tierlog.storage.tier.local_store import LocalDirectoryStore

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


def nudge(plane: ControlPlane, namespace: str, name: str) -> None:
    """Change the cluster's annotations, a change that wakes a pass and alters nothing."""
    plane.kubectl(
        "annotate", "-n", namespace, "--overwrite", "tierlogcluster", name,
        f"test.tierlog.io/nudge={time.monotonic_ns()}",
    )  # fmt: skip


# kopf's line when a replica, which starts paused, finds no peer of a higher priority
RESUMED = "Resuming operations after the pause"


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

    body = wait_ready(kube, ns, "demo", "Ready")
    assert condition(body, "Progressing")["status"] == "False"
    assert condition(body, "Degraded")["status"] == "False"
    assert condition(body, "ReconciliationPaused")["status"] == "False"
    assert body["status"]["readyBrokers"] == 2
    assert [b["state"] for b in body["status"]["brokers"]] == ["Running", "Running"]
    table = kube.kubectl("get", "tierlogclusters", "-n", ns).stdout
    assert table.splitlines()[1].split()[:4] == ["demo", "2", "2", "True"]

    with urllib.request.urlopen(operator.health_url, timeout=5) as answer:
        assert answer.status == 200
    text = operator.scrape()
    assert 'tierlog_operator_reconciliations_total{kind="TierlogCluster"}' in text
    # What an alert compares the brokers Prometheus scrapes with.
    assert f'tierlog_cluster_brokers_desired{{namespace="{ns}",tierlog_cluster="demo"}} 2.0' in text
    assert "tierlog_operator_reconcile_duration_seconds_bucket" in text
    assert AdminClient(brokers.sidecars[0].address).list_topics() == {}


def wait_ready(kube: ControlPlane, ns: str, name: str, what: str) -> dict[str, Any]:
    """The cluster ``name`` once its Ready condition is True (``what`` names the wait)."""

    def ready() -> dict[str, Any] | None:
        body = get(kube, ns, "tierlogcluster", name)
        return body if condition(body, "Ready")["status"] == "True" else None

    found: dict[str, Any] = wait_for(what, ready)
    return found


def ready_cluster(
    kube: ControlPlane, ns: str, brokers: Brokers, name: str, count: int, **spec: Any
) -> dict[str, Any]:
    """Apply a cluster, start its brokers, and wait until it is Ready."""
    apply(kube, ns, cluster(name, brokers=count, **spec))
    wait_for("the StatefulSet", lambda: get(kube, ns, "statefulset", name))
    for node in range(count):
        brokers.start(node)
    return wait_ready(kube, ns, name, f"{name} Ready")


def topic(name: str, cluster_name: str, partitions: int, **config: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogTopic",
        "metadata": {"name": name},
        "spec": {"cluster": cluster_name, "partitions": partitions, "config": config},
    }


def test_topics_are_created_grown_and_reconfigured_on_every_broker(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[[str, str], Brokers]
) -> None:
    ns = operator.namespace
    brokers = brokers_for(ns, "demo")
    ready_cluster(kube, ns, brokers, "demo", 2)
    apply(kube, ns, topic("orders", "demo", 3, **{"retention.ms": 60000}))

    def synced(partitions: int) -> dict[str, Any] | None:
        body = get(kube, ns, "tierlogtopic", "orders")
        ok = condition(body, "Ready")["status"] == "True"
        return body if ok and body["status"]["partitions"] == partitions else None

    body = wait_for("the topic Ready", lambda: synced(3))
    assert body["status"]["topicName"] == "orders"
    for sidecar in brokers.sidecars.values():
        with AdminClient(sidecar.address) as admin:
            assert admin.list_topics() == {"orders": 3}
            assert admin.describe_configs("orders")["retention.ms"].value == "60000"
    assert ("TopicUpdated", "broker 0: created") in events(kube, ns)

    apply(kube, ns, topic("orders", "demo", 5, **{"segment.bytes": 1048576}))
    grown = wait_for("the topic grown", lambda: synced(5))
    assert grown["status"]["config"] == {"segment.bytes": "1048576"}  # retention.ms went
    for sidecar in brokers.sidecars.values():
        with AdminClient(sidecar.address) as admin:
            assert admin.list_topics() == {"orders": 5}
            configs = admin.describe_configs("orders")
            assert configs["segment.bytes"].value == "1048576"
            assert configs["retention.ms"].is_default  # the override was removed
    assignment = wait_for(
        "the cluster's plan to hold the grown topic",
        lambda: (
            get(kube, ns, "tierlogcluster", "demo")["status"]["assignment"]["orders"][4] >= 0
            and get(kube, ns, "tierlogcluster", "demo")["status"]["assignment"]
        ),
    )
    # the sidecars agree with the plan the operator published
    metadata = AdminClient(brokers.sidecars[1].address).metadata(["orders"])
    assert list(metadata.leaders["orders"]) == assignment["orders"]


def test_a_replicated_clusters_topic_is_placed_once_in_the_store_with_its_replicas(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[[str, str], Brokers]
) -> None:
    """Asked of every broker, as for any cluster: the first creates the topic in the
    partition-state store (spec.replication's factor), the others find it there."""
    ns = operator.namespace
    apply(kube, ns, cluster("repl", brokers=3, replication={"factor": 2, "minInsyncReplicas": 1}))
    wait_for("the brokers' Role", lambda: get(kube, ns, "role", "repl-partition-state"))
    brokers = brokers_for(ns, "repl")
    brokers.with_service_account("repl-broker")
    for node in range(3):
        brokers.start(node)
    wait_ready(kube, ns, "repl", "repl Ready")
    store = open_store("kube", f"{kube.kubeconfig} {ns} repl")
    for partitions in (3, 5):
        apply(kube, ns, topic("orders", "repl", partitions, **{"retention.ms": 60000}))

        def synced(count: int = partitions) -> bool:
            body = get(kube, ns, "tierlogtopic", "orders")
            ready = condition(body, "Ready")["status"] == "True"
            return ready and int(body["status"]["partitions"]) == count

        wait_for(f"the topic Ready with {partitions} partitions", synced)
        placed = store.read_topic("orders")
        assert sorted(placed) == list(range(partitions))
        assert all(len(state.replicas) == 2 for state in placed.values()), placed
    assert store.read_topic_configs("orders") == {"retention.ms": "60000"}


def test_a_topic_of_a_missing_cluster_is_not_ready(
    kube: ControlPlane, operator: RunningOperator
) -> None:
    ns = operator.namespace
    apply(kube, ns, topic("lost", "nowhere", 1))
    body = wait_for(
        "the topic's condition",
        lambda: (
            get(kube, ns, "tierlogtopic", "lost")
            if get(kube, ns, "tierlogtopic", "lost").get("status")
            else None
        ),
    )
    assert condition(body, "Ready")["reason"] == "ClusterNotFound"


def test_a_config_change_rolls_one_safe_broker_at_a_time(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[[str, str], Brokers]
) -> None:
    ns = operator.namespace
    brokers = brokers_for(ns, "demo")
    before = ready_cluster(kube, ns, brokers, "demo", 2)["status"]["configHash"]
    apply(kube, ns, cluster("demo", brokers=2, logDefaults={"log.retention.ms": 3600000}))
    after = wait_for(
        "a new config hash",
        lambda: (
            get(kube, ns, "tierlogcluster", "demo")["status"]["configHash"] != before
            and get(kube, ns, "tierlogcluster", "demo")["status"]["configHash"]
        ),
    )
    assert "log.retention.ms=3600000" in brokers.config_map()["server.properties"]
    # the highest id goes first; the other is left alone while it is away
    wait_for("broker 1's pod deleted", lambda: not brokers.pod_exists(1))
    with operator.next_pass():  # one that sees broker 1 away, and would restart broker 0
        brokers.stop(1)
    assert brokers.pod_exists(0)
    body = get(kube, ns, "tierlogcluster", "demo")
    assert condition(body, "Progressing")["reason"] == "RollingUpdate"
    assert condition(body, "Ready")["status"] == "False"
    brokers.start(1)  # the StatefulSet controller and the kubelet, by hand
    wait_for("broker 0's pod deleted", lambda: not brokers.pod_exists(0))
    brokers.stop(0)
    brokers.start(0)

    body = wait_ready(kube, ns, "demo", "Ready after the roll")
    assert {b["configHash"] for b in body["status"]["brokers"]} == {after}
    restarts = [message for reason, message in events(kube, ns) if reason == "RestartingBroker"]
    assert len(restarts) == 2
    assert any("demo-1" in message for message in restarts)
    assert all("flushed and safe" in message for message in restarts)
    # the restarted sidecar runs the new setting
    with AdminClient(brokers.sidecars[1].address) as admin:
        admin.create_topic("probe", 1)
        assert admin.describe_configs("probe")["retention.ms"].value == "3600000"


def test_scale_up_and_a_refused_scale_down_without_a_tier(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[[str, str], Brokers]
) -> None:
    ns = operator.namespace
    brokers = brokers_for(ns, "demo")
    ready_cluster(kube, ns, brokers, "demo", 2)
    kube.kubectl("scale", "-n", ns, "tierlogcluster/demo", "--replicas=1")

    def refused() -> dict[str, Any] | None:
        body = get(kube, ns, "tierlogcluster", "demo")
        return body if condition(body, "Degraded")["status"] == "True" else None

    body = wait_for("the refusal", refused)
    assert condition(body, "Degraded")["reason"] == "ScaleDownRefused"
    assert "no tier" in condition(body, "Degraded")["message"]
    assert get(kube, ns, "statefulset", "demo")["spec"]["replicas"] == 2
    for _ in range(3):  # three more passes, each refusing again
        with operator.next_pass():
            nudge(kube, ns, "demo")
    assert get(kube, ns, "statefulset", "demo")["spec"]["replicas"] == 2
    refusals = [reason for reason, _ in events(kube, ns) if reason == "ScaleDownRefused"]
    assert len(refusals) == 1  # an Event when the refusal began, not one per pass

    kube.kubectl("scale", "-n", ns, "tierlogcluster/demo", "--replicas=3")
    wait_for(
        "three replicas", lambda: get(kube, ns, "statefulset", "demo")["spec"]["replicas"] == 3
    )
    brokers.start(2)
    plan = json.loads(brokers.config_map()["assignment.json"])
    assert sorted(plan["brokers"]) == ["0", "1", "2"]
    assert plan["kafka_brokers"]["2"] == f"demo-2.demo-brokers.{ns}.svc:19092"
    body = wait_for(
        "Ready with three",
        lambda: (
            condition(get(kube, ns, "tierlogcluster", "demo"), "Ready")["status"] == "True"
            and get(kube, ns, "tierlogcluster", "demo")
        ),
    )
    assert condition(body, "Degraded")["status"] == "False"
    assert body["status"]["readyBrokers"] == 3


def test_a_refused_replicated_scale_down_keeps_the_leaving_broker_in_its_lease(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[[str, str], Brokers]
) -> None:
    """orders-0 has three replicas, more than two brokers can hold, so the scale-down is
    refused and broker 2 runs on: the brokers' Role must still let it renew its Lease
    (or the controller would fence it)."""
    ns = operator.namespace
    apply(kube, ns, cluster("shrink", brokers=3, replication={"factor": 2}))
    wait_for("the brokers' Role", lambda: get(kube, ns, "role", "shrink-partition-state"))
    brokers = brokers_for(ns, "shrink")
    brokers.with_service_account("shrink-broker")
    for node in range(3):
        brokers.start(node)
    store = open_store("kube", f"{kube.kubeconfig} {ns} shrink")
    store.create_topic("orders", {0: PartitionState.new((0, 1, 2))})
    kube.kubectl("scale", "-n", ns, "tierlogcluster/shrink", "--replicas=2")

    def refused() -> dict[str, Any] | None:
        body = get(kube, ns, "tierlogcluster", "shrink")
        return body if condition(body, "Degraded")["reason"] == "ScaleDownRefused" else None

    message = condition(wait_for("the refusal", refused), "Degraded")["message"]
    assert "replication factor 3 is larger than the 2 available brokers" in message
    assert get(kube, ns, "statefulset", "shrink")["spec"]["replicas"] == 3
    renewed = store.read_leases()[2].renewed_at  # after the pass that refused
    wait_for("broker 2 to renew its Lease", lambda: store.read_leases()[2].renewed_at > renewed)
    assert 2 in store.read_topic("orders")[0].isr


def test_a_replicated_clusters_plan_names_each_brokers_zone(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[[str, str], Brokers]
) -> None:
    """Its racks (the brokers place replicas across them) are the zones of the brokers'
    nodes; a node without a zone label gives its broker no rack."""
    ns = operator.namespace
    zones = {0: "zone-a", 1: "zone-b", 2: ""}
    nodes = {broker: f"{ns}-node-{broker}" for broker in zones}
    for broker, zone in zones.items():
        labels = {"topology.kubernetes.io/zone": zone} if zone else {}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": nodes[broker], "labels": labels},
        }
        kube.kubectl("apply", "-f", "-", input=json.dumps(node))
    apply(kube, ns, cluster("zoned", brokers=3, replication={"factor": 2}))
    wait_for("the StatefulSet", lambda: get(kube, ns, "statefulset", "zoned"))
    brokers = brokers_for(ns, "zoned")
    brokers.node_names = nodes
    for broker in zones:
        brokers.create_pod(broker, 9092)

    def racks() -> dict[str, str]:
        plan = json.loads(brokers.config_map()["assignment.json"])
        found: dict[str, str] = plan.get("racks", {})
        return found

    # each pass reads the pods created so far: the plan has every zone once all are there
    wait_for("the plan's racks", lambda: racks() == {"0": "zone-a", "1": "zone-b"})


def test_a_failing_pass_is_degraded_until_one_gets_through(
    kube: ControlPlane, operator: RunningOperator
) -> None:
    ns = operator.namespace
    # A pod label the CRD lets through and the API server refuses on the StatefulSet.
    refused = {"template": {"pod": {"labels": {"team": "not a label value!"}}}}
    apply(kube, ns, cluster("refused", brokers=1, **refused))

    def degraded(status: str) -> dict[str, Any] | None:
        body = get(kube, ns, "tierlogcluster", "refused")
        return body if condition(body, "Degraded")["status"] == status else None

    body = wait_for("Degraded", lambda: degraded("True"))
    failed = condition(body, "Degraded")
    assert failed["reason"] == "ReconcileFailed"
    assert "not a label value!" in failed["message"], failed["message"]
    assert "Invalid value" in failed["message"], failed["message"]
    assert "retried" in failed["message"]
    apply(kube, ns, cluster("refused", brokers=1, template={"pod": {"labels": {"team": "a"}}}))
    body = wait_for("a pass that gets through", lambda: degraded("False"))
    assert condition(body, "Degraded")["reason"] == "AsExpected"
    assert (
        get(kube, ns, "statefulset", "refused")["spec"]["template"]["metadata"]["labels"]["team"]
        == "a"
    )


def _tier_with_objects(root: Path, count: int) -> Path:
    """A file:// tier holding ``count`` objects, written through the store brokers use."""
    store = LocalDirectoryStore(root)
    for index in range(count):
        store.put(f"orders-0/{index:020d}.log", b"segment bytes")
    return root


@pytest.mark.parametrize("policy", ["Retain", "Delete"])
def test_deletion_keeps_the_tier_unless_the_policy_says_delete(
    kube: ControlPlane, operator: RunningOperator, tmp_path: Path, policy: str
) -> None:
    ns = operator.namespace
    root = _tier_with_objects(tmp_path / "tier", 3)
    apply(kube, ns, cluster("gone", brokers=1, tier=shared_file_tier(root), deletionPolicy=policy))
    body = wait_for(
        "the finalizer",
        lambda: (
            "tierlog.io/finalizer"
            in get(kube, ns, "tierlogcluster", "gone")["metadata"].get("finalizers", [])
            and get(kube, ns, "tierlogcluster", "gone")
        ),
    )
    wait_for("its brokers expected", lambda: 'tierlog_cluster="gone"' in operator.scrape())
    kube.kubectl("delete", "-n", ns, "tierlogcluster", "gone", "--wait=true", "--timeout=60s")
    left = [info.key for info in LocalDirectoryStore(root).list("")]
    reasons = dict(events(kube, ns))
    if policy == "Delete":
        assert left == []
        assert "3 objects deleted" in reasons["TierDataDeleted"]
    else:
        assert len(left) == 3
        assert "is kept" in reasons["TierDataRetained"]
    # no garbage collector runs here: the owned objects remain, owned by the deleted uid
    sts = get(kube, ns, "statefulset", "gone")
    assert sts["metadata"]["ownerReferences"][0]["uid"] == body["metadata"]["uid"]
    # A deleted cluster expects no brokers: no series left for an alert to fire on.
    assert 'tierlog_cluster="gone"' not in operator.scrape()


def test_deleting_the_tier_waits_for_the_brokers_to_stop(
    kube: ControlPlane,
    operator: RunningOperator,
    brokers_for: Callable[[str, str], Brokers],
    tmp_path: Path,
) -> None:
    ns = operator.namespace
    root = _tier_with_objects(tmp_path / "tier", 3)
    brokers = brokers_for(ns, "gone")
    spec = {"tier": shared_file_tier(root), "deletionPolicy": "Delete"}
    ready_cluster(kube, ns, brokers, "gone", 1, **spec)
    kube.kubectl("delete", "-n", ns, "tierlogcluster", "gone", "--wait=false")
    wait_for(
        "the brokers scaled to zero",
        lambda: get(kube, ns, "statefulset", "gone")["spec"]["replicas"] == 0,
    )
    waiting = wait_for(
        "the Event", lambda: [m for r, m in events(kube, ns) if r == "WaitingForBrokers"]
    )
    assert "waiting for brokers ['gone-0'] to stop" in waiting[0]
    retried = "cluster_deleted' failed temporarily: waiting for brokers"  # kopf's line
    before = operator.output.count(retried)
    wait_for("three more tries", lambda: operator.output.count(retried) >= before + 3)
    assert len([info.key for info in LocalDirectoryStore(root).list("")]) == 3
    assert get(kube, ns, "tierlogcluster", "gone")["metadata"]["deletionTimestamp"]
    assert len([r for r, _ in events(kube, ns) if r == "WaitingForBrokers"]) == 1

    brokers.stop(0)  # the StatefulSet controller and the kubelet, by hand
    kube.kubectl("delete", "-n", ns, "pod", "gone-0")
    kube.kubectl("wait", "-n", ns, "--for=delete", "tierlogcluster/gone", "--timeout=60s")
    assert [info.key for info in LocalDirectoryStore(root).list("")] == []
    assert "3 objects deleted" in dict(events(kube, ns))["TierDataDeleted"]


def test_the_pause_annotation_stops_reconciliation(
    kube: ControlPlane, operator: RunningOperator
) -> None:
    ns = operator.namespace
    apply(kube, ns, cluster("held", brokers=2))
    wait_for("the StatefulSet", lambda: get(kube, ns, "statefulset", "held"))
    kube.kubectl(
        "annotate", "-n", ns, "tierlogcluster", "held", "tierlog.io/pause-reconciliation=true"
    )
    paused = wait_for(
        "ReconciliationPaused",
        lambda: (
            condition(get(kube, ns, "tierlogcluster", "held"), "ReconciliationPaused")["status"]
            == "True"
            and get(kube, ns, "tierlogcluster", "held")
        ),
    )
    assert condition(paused, "ReconciliationPaused")["reason"] == "PausedByAnnotation"
    with operator.next_pass():  # the one the change wakes, which would scale
        kube.kubectl("scale", "-n", ns, "tierlogcluster/held", "--replicas=4")
    assert get(kube, ns, "statefulset", "held")["spec"]["replicas"] == 2
    kube.kubectl("annotate", "-n", ns, "tierlogcluster", "held", "tierlog.io/pause-reconciliation-")
    wait_for(
        "the scale once resumed",
        lambda: get(kube, ns, "statefulset", "held")["spec"]["replicas"] == 4,
    )
    body = get(kube, ns, "tierlogcluster", "held")
    assert condition(body, "ReconciliationPaused")["status"] == "False"


def test_replicas_peer_through_kopfs_peering_object(kube: ControlPlane, tmp_path: Path) -> None:
    ns = kube.create_namespace("peer")
    first = start_operator(kube, ns, tmp_path / "first.log", "--priority=10")
    second = start_operator(kube, ns, tmp_path / "second.log", "--priority=5")
    try:
        peering = wait_for(
            "both replicas in the peering object",
            lambda: (
                len(get(kube, ns, "kopfpeering", "tierlog-operator").get("status", {})) == 2
                and get(kube, ns, "kopfpeering", "tierlog-operator")
            ),
        )
        priorities = sorted(peer["priority"] for peer in peering["status"].values())
        assert priorities == [5, 10]
        apply(kube, ns, cluster("shared", brokers=1))
        wait_for("the active replica's work", lambda: get(kube, ns, "statefulset", "shared"))
        wait_for("its handler", lambda: "Handler 'create' succeeded" in first.output)
        assert RESUMED not in second.output  # it never stopped waiting, so it did nothing:
        assert "Handler 'create' succeeded" not in second.output
        assert second.passes() == (0, 0)
    finally:
        first.stop()
        second.stop()


def test_service_monitor_and_network_policy_when_asked_and_their_crd_exists(
    kube: ControlPlane, operator: RunningOperator
) -> None:
    ns = operator.namespace
    # The Prometheus Operator's own CRD (from its Go module): the server checks our object
    # against its real schema.
    for path in monitoring_crd_files():
        kube.kubectl("apply", "--server-side", "-f", str(path))
    kube.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/servicemonitors.monitoring.coreos.com",
    )  # fmt: skip
    spec = {
        "brokers": 1,
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
        "networkPolicy": {"enabled": True, "allowedClients": [{"matchLabels": {"c": "1"}}]},
    }
    apply(kube, ns, cluster("watched", **spec))
    monitor = wait_for("the ServiceMonitor", lambda: get(kube, ns, "servicemonitor", "watched"))
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    # The real schema keeps the label that tells two clusters' brokers apart.
    assert monitor["spec"]["endpoints"][0]["relabelings"][0]["targetLabel"] == "tierlog_cluster"
    policy = wait_for("the NetworkPolicy", lambda: get(kube, ns, "networkpolicy", "watched"))
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    # stored as applied: the operator's pods (its default namespace and labels) admitted
    assert {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tierlog-system"}},
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "tierlog",
                "app.kubernetes.io/component": "operator",
            }
        },
    } in policy["spec"]["ingress"][0]["from"]
    # switched off again: both go
    apply(kube, ns, cluster("watched", brokers=1))

    def gone(kind: str) -> bool:
        done = kube.kubectl("get", kind, "watched", "-n", ns, check=False)
        return done.returncode != 0 and "NotFound" in done.stderr

    wait_for("the ServiceMonitor removed", lambda: gone("servicemonitor"))
    wait_for("the NetworkPolicy removed", lambda: gone("networkpolicy"))


def test_brokers_run_the_operators_image_unless_the_cluster_names_one(
    kube: ControlPlane, tmp_path: Path
) -> None:
    """The CRD no longer writes a default image into the cluster at admission, so the
    operator's (the chart's ``image``) reaches the StatefulSet; a cluster's own wins."""
    ns = kube.create_namespace("image")
    running = start_operator(
        kube,
        ns,
        tmp_path / "operator.log",
        "--standalone",
        "--broker-image=registry.example/tierlog:9.9",
        "--broker-image-pull-policy=Never",
        "--broker-image-pull-secrets=regcred,mirror",
    )
    try:
        apply(kube, ns, cluster("plain", brokers=1))
        pinned = {"image": "pinned.example/tierlog:1", "imagePullSecrets": [{"name": "own"}]}
        apply(kube, ns, cluster("pinned", brokers=1, **pinned))
        for name, image, policy, secrets in (
            ("plain", "registry.example/tierlog:9.9", "Never", ["regcred", "mirror"]),
            ("pinned", "pinned.example/tierlog:1", "Never", ["own"]),
        ):
            sts = wait_for(f"the StatefulSet {name}", partial(get, kube, ns, "statefulset", name))
            pod = sts["spec"]["template"]["spec"]
            broker = pod["containers"][0]
            assert (broker["image"], broker["imagePullPolicy"]) == (image, policy), name
            assert [secret["name"] for secret in pod["imagePullSecrets"]] == secrets, name
    finally:
        running.stop()


def test_an_image_that_cannot_be_pulled_is_named_in_status_and_a_warning(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[[str, str], Brokers]
) -> None:
    """The kubelet's word (containerStatuses[].state.waiting) reaches the cluster: Degraded
    and Ready say which pod cannot pull which image, and a Warning Event once."""
    ns, image = operator.namespace, "registry.invalid/tierlog:no-such-tag"
    apply(kube, ns, cluster("unpulled", brokers=1, image=image))
    wait_for("the StatefulSet", lambda: get(kube, ns, "statefulset", "unpulled"))
    brokers = brokers_for(ns, "unpulled")
    brokers.create_pod(0, 9092)
    backing_off: dict[str, Any] = {
        "phase": "Pending",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [
            {
                "name": "tierlog",
                "image": image,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": f'Back-off pulling image "{image}"',
                    }
                },
            }
        ],
    }
    brokers.write_pod_status(0, backing_off)

    def degraded() -> dict[str, Any] | None:
        body = get(kube, ns, "tierlogcluster", "unpulled")
        return body if condition(body, "Degraded")["reason"] == "ImagePullFailed" else None

    body = wait_for("Degraded naming the image", degraded)
    named = f"unpulled-0 cannot pull image {image} (ImagePullBackOff"
    assert named in condition(body, "Degraded")["message"]
    ready = condition(body, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ImagePullFailed")
    assert named in ready["message"]
    warnings = wait_for(
        "the Warning Event",
        lambda: [
            e
            for e in kube.get_json("events", "-n", ns)["items"]
            if e["reason"] == "ImagePullFailed"
        ],
    )
    assert warnings[0]["type"] == "Warning"
    assert named in warnings[0]["message"]
    assert warnings[0]["involvedObject"]["name"] == "unpulled"

    # The spec names an image that exists: the operator replaces the pod at once (it never
    # started, so there is no sidecar to ask), though it is not ready.
    apply(kube, ns, cluster("unpulled", brokers=1, image="registry.example/tierlog:good"))
    wait_for("the stuck pod replaced", lambda: not brokers.pod_exists(0))
    replaced = [m for r, m in events(kube, ns) if r == "RestartingBroker"]
    assert "replacing unpulled-0 (broker 0), which cannot pull its image" in replaced[0]
    brokers.start(0)  # the StatefulSet controller's new pod, whose image comes
    wait_ready(kube, ns, "unpulled", "Ready with the new image")
    assert condition(get(kube, ns, "tierlogcluster", "unpulled"), "Degraded")["status"] == "False"
