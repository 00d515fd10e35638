"""Changes to a running cluster on the real node, with data in it: a configuration change
rolls the brokers one at a time, each once its sidecar says it is safe, while a producer
keeps sending; scaling 3 -> 2 drains the leaving broker through the tier (MinIO), and
every record is still there. One tiered cluster for the module, rolled then scaled."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Node
from tests.e2e.pod_history import watching_pods
from tests.e2e.workloads import (
    Brokers,
    count_records,
    finish_job,
    make_topic,
    produce_records,
    run_job,
    start_job,
    tiered_cluster,
)
from tests.support.minio import MinioServer

pytestmark = pytest.mark.e2e

# Every topic is tiered: a scale-down is refused while a leaving broker holds one that is not.
TIERED: dict[str, object] = {"remote.storage.enable": True}
ROLL_RECORDS, ROLL_RATE = 9000, 100  # 90 s of sending: longer than three restarts
DRAINED = 3000


@pytest.fixture(scope="module")
def brokers(one_node: Node, operator: str, tier: MinioServer) -> Iterator[Brokers]:
    with tiered_cluster(one_node, tier, "changed") as cluster:
        yield cluster


def _cluster(node: Node, brokers: Brokers) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(
        node.kubectl("get", "tierlogcluster", brokers.name, "-n", brokers.namespace, "-o", "json")
    )
    return found


def _pods(node: Node, brokers: Brokers) -> dict[str, dict[str, Any]]:
    listed = json.loads(
        node.kubectl("get", "pods", "-n", brokers.namespace, "-l", brokers.selector, "-o", "json")
    )
    return {pod["metadata"]["name"]: pod for pod in listed["items"]}


def _events(node: Node, brokers: Brokers, reason: str) -> list[str]:
    about = f"--field-selector=reason={reason},involvedObject.name={brokers.name}"
    listed = json.loads(node.kubectl("get", "events", "-n", brokers.namespace, "-o", "json", about))
    return [event["message"] for event in listed["items"]]


def _rolled(node: Node, brokers: Brokers, old_uids: set[str]) -> bool:
    """Every broker pod replaced, Ready, on the hash the cluster wants, and the cluster
    Ready for its latest generation."""
    cluster, pods = _cluster(node, brokers), _pods(node, brokers)
    status = cluster.get("status", {})
    ready = {c["type"]: c["status"] for c in status.get("conditions", [])}.get("Ready")
    return (
        status.get("observedGeneration") == cluster["metadata"]["generation"]
        and ready == "True"
        and len(pods) == brokers.count
        and all(
            pod["metadata"]["uid"] not in old_uids
            and pod["metadata"]["annotations"].get("tierlog.io/config-hash") == status["configHash"]
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in pod["status"].get("conditions", [])
            )
            for pod in pods.values()
        )
    )


def _serves_the_plan(node: Node, brokers: Brokers, pod: str) -> bool:
    """Whether ``pod``'s broker names an owner among the staying brokers for every
    partition of the cluster's topics (its Metadata, from the plan it has read)."""
    for topic in ("rolling", "drained"):
        described = node.kubectl(
            "exec", "-n", brokers.namespace, pod, "-c", "tierlog", "--",
            "tierlog", "topics", "describe", topic, "--server", "localhost:9092",
        )  # fmt: skip
        leaders = [line.split("Leader: ")[1].split()[0] for line in described.splitlines()[1:]]
        if not leaders or set(leaders) - {"0", "1"}:
            return False
    return True


def test_a_configuration_change_rolls_one_safe_broker_at_a_time_under_a_producer(
    one_node: Node, brokers: Brokers, tmp_path: Path
) -> None:
    make_topic(one_node, brokers, "rolling", TIERED)
    old_uids = {pod["metadata"]["uid"] for pod in _pods(one_node, brokers).values()}
    names = [f"{brokers.name}-{i}" for i in range(brokers.count)]
    kubeconfig, namespace = one_node.layout.admin_kubeconfig, brokers.namespace

    with watching_pods(kubeconfig, namespace, brokers.selector, tmp_path, len(names)) as seen:
        producer = produce_records("rolling", ROLL_RECORDS, ROLL_RATE)
        start_job(one_node, brokers, "roll-producer", producer)
        one_node.wait(namespace, "--for=jsonpath={.status.ready}=1", "job/roll-producer", 120)
        change = {"spec": {"logDefaults": {"log.retention.ms": 86_400_000}}}
        one_node.kubectl(
            "patch", "tierlogcluster", brokers.name, "-n", namespace, "--type=merge",
            "-p", json.dumps(change),
        )  # fmt: skip
        deadline = time.monotonic() + 600
        while not _rolled(one_node, brokers, old_uids):
            assert time.monotonic() < deadline, f"no roll in 600 s:\n{one_node.story(namespace)}"
            time.sleep(2)  # polling: a restart takes seconds, and a roll is passed every 2 s
        produced = finish_job(one_node, brokers, "roll-producer", timeout_s=300)
    history = seen[0]

    down, until = history.most_not_ready(names)
    assert down == 1, "\n".join(map(str, until))  # one broker restarted at a time, never two
    assert history.restart_order() == names[::-1]  # highest id first
    restarts = _events(one_node, brokers, "RestartingBroker")
    assert sorted(restarts) == sorted(m for m in restarts if "flushed and safe" in m)
    assert {m.split()[1] for m in restarts} == set(names), restarts  # "restarting NAME-N ..."

    # The producer sent through all three restarts and every record was acknowledged
    # (perf produce exits non-zero otherwise); every one of them is there.
    assert f"{ROLL_RECORDS} records sent" in produced, one_node.story(namespace)
    counted = run_job(one_node, brokers, "roll-count", count_records("rolling", ROLL_RECORDS))
    assert counted.strip().splitlines()[-1] == str(ROLL_RECORDS), one_node.story(namespace)


def test_scaling_from_three_to_two_drains_the_leaving_broker_through_the_tier(
    one_node: Node, brokers: Brokers
) -> None:
    namespace, leaving = brokers.namespace, f"{brokers.name}-2"
    # Small segments: most of what broker 2 holds is closed segments the tier must have
    # before its partitions can move; the rest (its active segments) is rolled by the drain.
    make_topic(one_node, brokers, "drained", {**TIERED, "segment.bytes": 65536}, partitions=6)
    run_job(one_node, brokers, "produce-drained", produce_records("drained", DRAINED))
    owners = _cluster(one_node, brokers)["status"]["assignment"]["drained"]
    assert 2 in owners, f"broker 2 holds none of drained's partitions: {owners}"

    one_node.kubectl("scale", "tierlogcluster", brokers.name, "-n", namespace, "--replicas=2")
    one_node.wait(namespace, "--for=delete", f"pod/{leaving}", 600)
    cluster = f"tierlogcluster/{brokers.name}"
    one_node.wait(namespace, "--for=jsonpath={.status.replicas}=2", cluster)
    one_node.wait(namespace, "--for=condition=Ready", cluster)

    status = _cluster(one_node, brokers)["status"]
    for topic, partition_owners in status["assignment"].items():
        assert set(partition_owners) <= {0, 1}, f"{topic}: {partition_owners}"
    for step in ("PartitionsReleased", "PartitionsHandedOver", "Scaled"):
        assert _events(one_node, brokers, step), f"no {step} Event:\n{one_node.story(namespace)}"
    # docs/OPERATOR.md: the leaving broker's volume stays (whenScaled: Retain).
    claim = one_node.kubectl(
        "get", "pvc", f"data-{leaving}", "-n", namespace, "-o", "jsonpath={.status.phase}"
    )
    assert claim == "Bound"

    # The plan reaches the staying brokers through their mounted ConfigMap (a kubelet
    # sync, up to about a minute): measured here, and waited for before reading.
    handed_over = time.monotonic()
    deadline = handed_over + 180
    while not all(_serves_the_plan(one_node, brokers, f"{brokers.name}-{i}") for i in (0, 1)):
        assert time.monotonic() < deadline, f"plan not served:\n{one_node.story(namespace)}"
        time.sleep(2)  # the kubelet's next sync of the ConfigMap volume
    print(f"\nthe staying brokers serve the new plan {time.monotonic() - handed_over:.0f} s after")

    two = Brokers(namespace, brokers.name, count=2)
    for topic, records in (("drained", DRAINED), ("rolling", ROLL_RECORDS)):
        counted = run_job(one_node, two, f"count-{topic}", count_records(topic, records))
        assert counted.strip().splitlines()[-1] == str(records), one_node.story(namespace)
