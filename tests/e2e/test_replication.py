"""Replication on the real node: a 3-broker ``TierlogCluster`` with ``spec.replication``
keeps its partition state in the API server (the brokers' own ServiceAccount and Role),
and the operator's controller moves a partition's leadership when its leader's pod goes.

A topic with replication factor 3 takes a producer Job's records with ``acks=all`` (the
producer's default); the leader's pod is deleted while it sends; a new leader from the
in-sync replicas takes over (handed over by the stopping broker's controlled shutdown,
or elected by the operator's controller once its Lease expires) and the partition keeps
taking writes: the Job ends with every record acknowledged, and a consumer reads each
of them back exactly once. The deleted broker comes back (the StatefulSet) and rejoins
the ISR.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.conftest import Node
from tests.e2e.workloads import (
    Brokers,
    apply,
    count_records,
    finish_job,
    produce_records,
    run_job,
    start_job,
)
from tierlog.operator.render.configmap import DATA_DIR
from tierlog.partition_state.kube_store import part_config_map_name
from tierlog.partition_state.model import PartitionState, part_from_json

pytestmark = pytest.mark.e2e

TOPIC = "ledger"
RECORDS, RATE = 6000, 100  # 60 s of sending: the leader goes early on
SENT_BEFORE_BYTES = 64 * 1024  # some 500 records of 100 bytes acknowledged before it goes
CLUSTER = "replicated"


@pytest.fixture(scope="module")
def brokers(one_node: Node, operator: str) -> Iterator[Brokers]:
    namespace = one_node.create_namespace("replicated")
    cluster = {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogCluster",
        "metadata": {"name": CLUSTER},
        "spec": {"brokers": 3, "replication": {"factor": 3, "minInsyncReplicas": 2}},
    }
    try:
        apply(one_node, namespace, cluster)
        one_node.wait(namespace, "--for=condition=Ready", f"tierlogcluster/{CLUSTER}")
        yield Brokers(namespace, CLUSTER)
    finally:
        one_node.delete_namespace(namespace)


def _state(node: Node, brokers: Brokers) -> PartitionState | None:
    """Partition 0's state in the cluster's partition-state store (None: not yet)."""
    return _topic_states(node, brokers.namespace, brokers.name, TOPIC).get(0)


def _wait_state(
    node: Node,
    brokers: Brokers,
    what: str,
    check: Callable[[PartitionState], bool],
    timeout_s: float = 180,
) -> PartitionState:
    deadline = time.monotonic() + timeout_s
    while True:
        state = _state(node, brokers)
        if state is not None and check(state):
            return state
        assert time.monotonic() < deadline, (
            f"timed out waiting for {what} (last: {state}):\n{node.story(brokers.namespace)}"
        )
        time.sleep(0.5)  # polling the store, which the brokers and the controller write


def _log_bytes(node: Node, brokers: Brokers, pod: str) -> int:
    """The size of the partition's first segment on ``pod`` (segments are not
    preallocated, so it grows with every acknowledged batch)."""
    segment = f"{DATA_DIR}/{TOPIC}-0/{0:020d}.log"
    done = node.kubectl(
        "exec", "-n", brokers.namespace, pod, "-c", "tierlog", "--", "stat", "-c", "%s", segment
    )
    return int(done.strip())


def test_a_replicated_partition_keeps_taking_writes_when_its_leaders_pod_is_deleted(
    one_node: Node, brokers: Brokers
) -> None:
    namespace = brokers.namespace
    accounts = one_node.kubectl("get", "pods", "-n", namespace, "-l", brokers.selector,
                                "-o", "jsonpath={.items[*].spec.serviceAccountName}")  # fmt: skip
    assert accounts.split() == [f"{CLUSTER}-broker"] * 3

    created = run_job(
        one_node, brokers, "create-ledger",
        f"tierlog topics create {TOPIC} --partitions 1 --replication-factor 3",
    )  # fmt: skip
    before = _wait_state(one_node, brokers, "all three replicas in sync", lambda s: len(s.isr) == 3)
    assert sorted(before.replicas) == [0, 1, 2], created

    start_job(one_node, brokers, "ledger-producer", produce_records(TOPIC, RECORDS, RATE))
    one_node.wait(namespace, "--for=jsonpath={.status.ready}=1", "job/ledger-producer", 120)
    leader_pod = f"{CLUSTER}-{before.leader}"
    deadline = time.monotonic() + 120
    while _log_bytes(one_node, brokers, leader_pod) < SENT_BEFORE_BYTES:
        assert time.monotonic() < deadline, one_node.story(namespace)
        time.sleep(0.5)  # polling the leader's segment as the producer fills it
    one_node.kubectl("delete", "pod", leader_pod, "-n", namespace, "--wait=false")

    after = _wait_state(
        one_node, brokers, "a new leader elected",
        lambda s: s.leader not in (before.leader, -1) and s.leader_epoch > before.leader_epoch,
    )  # fmt: skip
    assert after.leader in before.isr
    produced = finish_job(one_node, brokers, "ledger-producer", timeout_s=300)
    assert f"{RECORDS} records sent" in produced, one_node.story(namespace)
    print(f"\nproducer through the leader's deletion: {produced.strip().splitlines()[-1]}")

    # Exactly once each: the consumer asks for more than were sent and waits it out.
    counted = run_job(one_node, brokers, "ledger-count", count_records(TOPIC, RECORDS * 2))
    assert counted.strip().splitlines()[-1] == str(RECORDS), one_node.story(namespace)

    one_node.wait(namespace, "--for=condition=Ready", f"pod/{leader_pod}")
    _wait_state(
        one_node, brokers, "the restarted broker back in the ISR", lambda s: len(s.isr) == 3
    )
    operator_log = one_node.kubectl("logs", "-n", "tierlog-system", "deployment/tierlog-operator")
    assert f"Controller of {namespace}/{CLUSTER} started" in operator_log


SHRINKING, MOVED_TOPIC, MOVED_RECORDS = "shrinking", "moved", 3000


def _topic_states(
    node: Node, namespace: str, cluster: str, topic: str
) -> dict[int, PartitionState]:
    """The topic's partitions in its head ConfigMap (all of them: it has fewer than a
    part holds)."""
    name = part_config_map_name(cluster, topic, 0, "")
    found = json.loads(
        node.kubectl("get", "configmap", "-n", namespace, "-o", "json", "--ignore-not-found", name)
        or "{}"
    )
    text = (found.get("data") or {}).get("part")
    return {} if text is None else part_from_json(text, f"ConfigMap {name}").partitions


def test_a_replicated_cluster_scales_down_by_moving_replicas_off_the_leaving_broker(
    one_node: Node, operator: str
) -> None:
    """3 brokers, replication factor 2, scaled to 2: the operator moves every replica of
    broker 2 to the staying brokers (Kafka's reassignment, completed by its controller
    once the new replicas are in sync), then the StatefulSet shrinks; every record
    acknowledged before is read back exactly once afterwards."""
    namespace = one_node.create_namespace("shrinking")
    cluster = {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogCluster",
        "metadata": {"name": SHRINKING},
        "spec": {"brokers": 3, "replication": {"factor": 2, "minInsyncReplicas": 1}},
    }
    try:
        apply(one_node, namespace, cluster)
        one_node.wait(namespace, "--for=condition=Ready", f"tierlogcluster/{SHRINKING}")
        brokers = Brokers(namespace, SHRINKING)
        run_job(
            one_node, brokers, "create-moved",
            f"tierlog topics create {MOVED_TOPIC} --partitions 3 --replication-factor 2",
        )  # fmt: skip
        produced = run_job(
            one_node, brokers, "moved-producer", produce_records(MOVED_TOPIC, MOVED_RECORDS)
        )
        assert f"{MOVED_RECORDS} records sent" in produced, one_node.story(namespace)
        before = _topic_states(one_node, namespace, SHRINKING, MOVED_TOPIC)
        assert any(2 in state.replicas for state in before.values()), before

        scaled_at = time.monotonic()
        one_node.kubectl("scale", "-n", namespace, f"tierlogcluster/{SHRINKING}", "--replicas=2")
        one_node.wait(
            namespace, "--for=jsonpath={.spec.replicas}=2", f"statefulset/{SHRINKING}", 300
        )
        print(f"\nreplicated scale 3 -> 2, replicas moved: {time.monotonic() - scaled_at:.1f} s")
        after = _topic_states(one_node, namespace, SHRINKING, MOVED_TOPIC)
        for partition, state in after.items():
            assert sorted(state.replicas) == [0, 1] and not state.reassigning, (partition, state)
            assert sorted(state.isr) == [0, 1], (partition, state)
        one_node.wait(namespace, "--for=delete", f"pod/{SHRINKING}-2", 300)
        one_node.wait(namespace, "--for=condition=Ready", f"tierlogcluster/{SHRINKING}")

        counted = run_job(
            one_node, brokers, "moved-count", count_records(MOVED_TOPIC, MOVED_RECORDS * 2)
        )
        assert counted.strip().splitlines()[-1] == str(MOVED_RECORDS), one_node.story(namespace)
        events = one_node.kubectl(
            "get", "events", "-n", namespace, "-o", "jsonpath={.items[*].reason}"
        )
        assert "ReassignmentStarted" in events.split(), events
    finally:
        one_node.delete_namespace(namespace)
