"""The operator runs the controller of each replicated cluster (``partition_controller.py``).

Real sidecars play the pods of a ``TierlogCluster`` with ``spec.replication``, each
started with a token of the ServiceAccount the operator rendered for its brokers, so the
rendered Role alone lets them keep their Leases and follow the partition state in the
API server. When the leader's sidecar is killed (``kill -9``: its Lease stops changing),
the operator's controller fences it and elects an in-sync replica, which takes the
writes; every acknowledged record is read back from it. With two peered operators only
the active one runs the controller, and the other takes it over when the first stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from tests.support.applied_states import has_applied
from tests.support.kube import ControlPlane
from tests.support.sidecars import SidecarProcess
from tests.support.state_stores import open_store
from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc
from tierlog.operator.partition_controller import unclean_election
from tierlog.operator.spec import ClusterSpec, Replication
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import PartitionState
from tierlog.partition_state.store import PartitionStateStore
from tierlog.storage.records import SimpleRecord, build_batch, decode_records, iter_batches

from .conftest import Brokers, RunningOperator, start_operator, wait_for
from .test_handlers import RESUMED, apply, cluster, events, get, topic

TOPIC = "orders"
REPLICATED = {"factor": 3, "minInsyncReplicas": 2}


def _log_stub(sidecar: SidecarProcess) -> log_service_pb2_grpc.LogServiceStub:
    return log_service_pb2_grpc.LogServiceStub(grpc.insecure_channel(sidecar.address))


def _leads(store: PartitionStateStore, sidecars: list[SidecarProcess], node: int) -> bool:
    """Whether broker ``node`` leads the partition in the epoch the store names, having
    applied that state, not only read it (``has_applied``)."""
    epoch = store.read_topic(TOPIC)[0].leader_epoch
    return has_applied(_log_stub(sidecars[node]), node, TOPIC, 0, node, epoch)


def _produce(sidecar: SidecarProcess, *values: bytes) -> int:
    """An acks=all produce; its base offset."""
    now = int(time.time() * 1000)
    batch = build_batch([SimpleRecord(None, value, now, ()) for value in values])
    response = _log_stub(sidecar).Produce(
        log_service_pb2.ProduceRequest(
            topic=TOPIC, partition=0, acks=log_service_pb2.ACKS_ALL, record_batches=batch
        ),
        timeout=20,
    )
    return int(response.base_offset)


def _values(sidecar: SidecarProcess) -> list[bytes]:
    fetched = _log_stub(sidecar).Fetch(
        log_service_pb2.FetchRequest(topic=TOPIC, partition=0, offset=0), timeout=10
    )
    data = fetched.record_batches
    return [r.value or b"" for h in iter_batches(data) for r in decode_records(data, h)]


def test_the_operators_controller_elects_a_new_leader_when_the_leaders_lease_expires(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[..., Brokers]
) -> None:
    ns = operator.namespace
    apply(kube, ns, cluster("repl", brokers=3, replication=REPLICATED))
    wait_for("the brokers' Role", lambda: get(kube, ns, "role", "repl-partition-state"))
    brokers = brokers_for(ns, "repl", "replica.fetch.backoff.ms=100")
    brokers.with_service_account("repl-broker")
    sidecars = [brokers.start(node) for node in range(3)]
    leases = kube.get_json("leases", "-n", ns)["items"]
    assert sorted(lease["metadata"]["name"] for lease in leases) == [
        "repl-broker-0",
        "repl-broker-1",
        "repl-broker-2",
    ]
    store = open_store("kube", f"{kube.kubeconfig} {ns} repl")
    store.create_topic(TOPIC, {0: PartitionState.new((0, 1, 2))})
    wait_for("broker 0 to lead", lambda: _leads(store, sidecars, 0))
    assert _produce(sidecars[0], b"a", b"b") == 0
    assert store.read_topic(TOPIC)[0].isr == (0, 1, 2)

    brokers.sidecars[0].process.kill()  # kill -9: its lease is renewed no more
    brokers.sidecars[0].process.wait()
    elected = wait_for(
        "the operator's controller to elect a new leader",
        lambda: (state := store.read_topic(TOPIC)[0]).leader not in (0, -1) and state,
        timeout_s=60,
    )
    assert (elected.leader_epoch, elected.isr) == (1, (1, 2)), elected  # 1 and 2 renew
    assert "fenced" in operator.output, operator.output
    leader = sidecars[elected.leader]
    wait_for(f"broker {elected.leader} to lead", lambda: _leads(store, sidecars, elected.leader))
    assert _produce(leader, b"c", b"d") == 2
    assert _values(leader) == [b"a", b"b", b"c", b"d"]


def test_only_the_active_operator_runs_the_controller(kube: ControlPlane, tmp_path: Path) -> None:
    ns = kube.create_namespace("peer-ctl")
    first = start_operator(kube, ns, tmp_path / "first.log", "--priority=10")
    second = start_operator(kube, ns, tmp_path / "second.log", "--priority=5")
    try:
        # Until each replica has seen the other in the peering object, both are active.
        wait_for(
            "both replicas in the peering object",
            lambda: len(get(kube, ns, "kopfpeering", "tierlog-operator").get("status", {})) == 2,
        )
        apply(kube, ns, cluster("repl", brokers=3, replication=REPLICATED))
        started = f"Controller of {ns}/repl started"
        wait_for("the active operator's controller", lambda: started in first.output)
        wait_for("the active operator's cluster pass", lambda: get(kube, ns, "statefulset", "repl"))
        assert RESUMED not in second.output  # it never stopped waiting, so it did nothing:
        assert started not in second.output
        assert second.passes() == (0, 0)
        first.stop()  # it leaves the peering object: the other resumes
        wait_for("the other operator's controller", lambda: started in second.output)
        assert f"Controller of {ns}/repl stopped" in first.output
    finally:
        first.stop()
        second.stop()


def test_a_replicated_scale_down_moves_the_leaving_brokers_replicas_then_shrinks(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[..., Brokers]
) -> None:
    """Kafka's reassignment driven by the operator: every partition with a replica on
    broker 2 gets a target without it, the new replicas copy the log and join the ISR,
    the operator's controller narrows each to its target (electing from it where broker
    2 led), and only then the StatefulSet shrinks. The status names each partition's
    leader; the controller's series are on the operator's metrics endpoint."""
    ns = operator.namespace
    apply(kube, ns, cluster("shrink", brokers=3, replication={"factor": 2, "minInsyncReplicas": 1}))
    wait_for("the brokers' Role", lambda: get(kube, ns, "role", "shrink-partition-state"))
    brokers = brokers_for(ns, "shrink", "replica.fetch.backoff.ms=100")
    brokers.with_service_account("shrink-broker")
    sidecars = [brokers.start(node) for node in range(3)]
    store = open_store("kube", f"{kube.kubeconfig} {ns} shrink")
    store.create_topic(TOPIC, {0: PartitionState.new((2, 0)), 1: PartitionState.new((0, 1))})
    wait_for("broker 2 to lead", lambda: _leads(store, sidecars, 2))
    assert _produce(sidecars[2], b"a", b"b") == 0
    apply(kube, ns, topic(TOPIC, "shrink", 2))  # found in the store: listed in the status

    kube.kubectl("scale", "-n", ns, "tierlogcluster/shrink", "--replicas=2")
    wait_for(
        "the StatefulSet to shrink",
        lambda: get(kube, ns, "statefulset", "shrink")["spec"]["replicas"] == 2,
        timeout_s=90,
    )
    moved = store.read_topic(TOPIC)
    assert moved[0].replicas == (1, 0) and moved[0].leader == 1, moved  # 2's place: 1
    assert moved[0].isr == (1, 0) and not moved[0].reassigning
    assert moved[1] == PartitionState.new((0, 1))  # held nothing of broker 2: untouched
    started = [message for reason, message in events(kube, ns) if reason == "ReassignmentStarted"]
    assert len(started) == 1 and f"{TOPIC}-0 to [1, 0]" in started[0], started
    wait_for("broker 1 to lead", lambda: _leads(store, sidecars, 1))
    assert _produce(sidecars[1], b"c") == 2
    assert _values(sidecars[1]) == [b"a", b"b", b"c"]

    def leaders_in_status() -> bool:
        status = get(kube, ns, "tierlogcluster", "shrink").get("status", {})
        return bool(status.get("assignment", {}).get(TOPIC) == [1, 0])

    wait_for("the status to name the leaders", leaders_in_status)
    scraped = operator.scrape()
    labels = f'namespace="{ns}",tierlog_cluster="shrink"'
    assert f"tierlog_controller_offline_partitions{{{labels}}} 0.0" in scraped
    assert f'tierlog_controller_leader_elections_total{{cause="reassignment",{labels}}} 1.0' in (
        scraped
    ), scraped


@pytest.mark.parametrize(
    ("cluster_default", "topic_config", "unclean"),
    [
        (None, None, False),  # Kafka's default
        (None, "true", True),
        (True, None, True),  # the cluster's logDefaults
        (True, "false", False),  # the topic's own config wins
    ],
)
def test_the_operators_controller_takes_unclean_election_from_the_topic_then_the_cluster(
    tmp_path: Path, cluster_default: bool | None, topic_config: str | None, unclean: bool
) -> None:
    store = LocalStateStore(tmp_path / "state")
    if topic_config is not None:
        store.write_topic_configs(TOPIC, {"unclean.leader.election.enable": topic_config})
    defaults = (
        {} if cluster_default is None else {"unclean.leader.election.enable": cluster_default}
    )
    spec = ClusterSpec("repl", "ns", log_defaults=defaults, replication=Replication())
    assert unclean_election(store, lambda: spec)(TOPIC) is unclean
