"""The path a user walks, on a real node: ``helm install`` of the chart with the image
built from the ``Dockerfile``, a 3-broker ``TierlogCluster`` whose claims bind, Jobs in
the cluster producing and consuming through the brokers' per-pod DNS names, and a
cluster tiering to a real MinIO that its pods reach."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import Node
from tests.e2e.workloads import (
    RECORDS,
    Brokers,
    apply,
    count_records,
    make_topic,
    produce_records,
    run_job,
    tiered_cluster,
)
from tests.support.minio import MinioServer
from tierlog.client import AdminClient
from tierlog.client.admin import ClusterMetadata
from tierlog.client.errors import TierlogError

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def brokers(one_node: Node, operator: str) -> Iterator[Brokers]:
    """``deploy/examples/cluster-minimal.yaml`` (3 brokers) in a namespace of its own, Ready."""
    namespace = one_node.create_namespace("brokers")
    try:
        cluster = yaml.safe_load(
            (REPO / "deploy" / "examples" / "cluster-minimal.yaml").read_text()
        )
        started = time.monotonic()
        apply(one_node, namespace, cluster)
        name = cluster["metadata"]["name"]
        one_node.wait(namespace, "--for=condition=Ready", f"tierlogcluster/{name}")
        print(f"\n3-broker cluster Ready {time.monotonic() - started:.1f} s after kubectl apply")
        yield Brokers(namespace, name)
    finally:
        # Waited for: the operator (still installed) removes its finalizers.
        one_node.delete_namespace(namespace)


def test_a_three_broker_cluster_binds_its_claims_and_serves_a_job_by_dns_names(
    one_node: Node, brokers: Brokers
) -> None:
    claims = json.loads(one_node.kubectl("get", "pvc", "-n", brokers.namespace, "-o", "json"))
    assert sorted(c["status"]["phase"] for c in claims["items"]) == ["Bound"] * 3

    make_topic(one_node, brokers, "orders")
    script = f"{produce_records('orders')} && {count_records('orders')}"
    output = run_job(one_node, brokers, "produce-consume", script)
    assert f"{RECORDS} records sent" in output, one_node.story(brokers.namespace)
    assert output.strip().splitlines()[-1] == str(RECORDS), one_node.story(brokers.namespace)


def test_a_deleted_broker_pod_comes_back_on_its_claim_with_every_record(
    one_node: Node, brokers: Brokers
) -> None:
    make_topic(one_node, brokers, "restarts")
    run_job(one_node, brokers, "produce-before-restart", produce_records("restarts"))
    pod = f"{brokers.name}-1"
    before = json.loads(one_node.kubectl("get", "pod", pod, "-n", brokers.namespace, "-o", "json"))
    claim = f"data-{pod}"
    volume = one_node.kubectl(
        "get", "pvc", claim, "-n", brokers.namespace, "-o", "jsonpath={.spec.volumeName}"
    )

    one_node.kubectl("delete", "pod", pod, "-n", brokers.namespace)  # returns once it is gone
    one_node.wait(brokers.namespace, "--for=create", f"pod/{pod}")  # the StatefulSet's new one
    one_node.wait(brokers.namespace, "--for=condition=Ready", f"pod/{pod}")
    one_node.wait(brokers.namespace, "--for=condition=Ready", f"tierlogcluster/{brokers.name}")

    after = json.loads(one_node.kubectl("get", "pod", pod, "-n", brokers.namespace, "-o", "json"))
    assert after["metadata"]["uid"] != before["metadata"]["uid"]  # a new pod...
    assert (  # ...on the same claim, still on the same volume
        one_node.kubectl(
            "get", "pvc", claim, "-n", brokers.namespace, "-o", "jsonpath={.spec.volumeName}"
        )
        == volume
    )
    output = run_job(one_node, brokers, "consume-after-restart", count_records("restarts"))
    assert output.strip().splitlines()[-1] == str(RECORDS), one_node.story(brokers.namespace)


def test_a_tiered_cluster_uploads_closed_segments_to_minio_and_serves_every_record(
    one_node: Node, operator: str, tier: MinioServer
) -> None:
    records = 3000
    with tiered_cluster(one_node, tier, "tiered") as brokers:
        topic_config: dict[str, object] = {"remote.storage.enable": True, "segment.bytes": 65536}
        make_topic(one_node, brokers, "tiered-orders", topic_config)
        run_job(one_node, brokers, "produce-tiered", produce_records("tiered-orders", records))

        # An upload pass runs every 30 s (remote.log.manager.task.interval.ms, which the
        # CRD does not expose): wait for the first one that finds closed segments.
        bucket = brokers.bucket
        deadline, uploaded = time.monotonic() + 180, 0
        while time.monotonic() < deadline and uploaded == 0:
            listed = tier.client().list_objects_v2(Bucket=bucket, Prefix="tiered/")
            uploaded = listed.get("KeyCount", 0)
            time.sleep(1)  # polling the bucket for the brokers' first upload pass
        assert uploaded > 0, f"nothing uploaded to {bucket}:\n{one_node.story(brokers.namespace)}"

        output = run_job(
            one_node, brokers, "consume-tiered", count_records("tiered-orders", records)
        )
        assert output.strip().splitlines()[-1] == str(records), one_node.story(brokers.namespace)


def _broker_views(
    one_node: Node, brokers: Brokers, topics: list[str]
) -> dict[int, ClusterMetadata]:
    """What each running broker's own Metadata says (asked from the host at its pod IP,
    on the node's bridge); a broker that does not answer, or lacks a topic, is left out."""
    listed = json.loads(
        one_node.kubectl(
            "get", "pods", "-n", brokers.namespace, "-l", brokers.selector, "-o", "json"
        )
    )
    views = {}
    for pod in listed["items"]:
        ip = pod.get("status", {}).get("podIP")
        if not ip:
            continue
        try:
            with AdminClient(f"{ip}:9092", request_timeout_ms=2000) as admin:
                view = admin.metadata(topics)
        except TierlogError:  # starting, or the topic not created there yet: not agreeing
            continue
        views[view.node_id] = view
    return views


def _seconds_until(what: str, check: Callable[[], bool], timeout_s: float = 180) -> float:
    """Seconds until ``check()`` is true, polled twice a second (the measurement)."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, f"never: {what}"
        time.sleep(0.5)  # polling the brokers' own view: the measurement's resolution
    return time.monotonic() - started


def test_a_scale_up_and_a_new_topic_reach_every_broker_within_seconds(
    one_node: Node, brokers: Brokers
) -> None:
    """A new partition plan reaches the running brokers by the operator's push, not when
    the kubelet refreshes their mounted ConfigMap (a minute or more): measured from
    ``kubectl scale`` until the three running brokers name the fourth, and from ``kubectl
    apply`` of a TierlogTopic until all four name the owners the operator placed. Left at
    four brokers: the cluster has no tier to drain one through."""
    ns, name = brokers.namespace, brokers.name
    one_node.kubectl("scale", "-n", ns, f"tierlogcluster/{name}", "--replicas=4")

    def the_running_know_the_new_one() -> bool:
        views = _broker_views(one_node, brokers, [])
        return all(node in views and 3 in views[node].brokers for node in range(3))

    known = _seconds_until("brokers 0-2 know broker 3", the_running_know_the_new_one)
    print(f"\nbrokers 0-2 knew broker 3 {known:.1f} s after kubectl scale")
    one_node.wait(ns, "--for=create", f"pod/{name}-3")
    one_node.wait(ns, "--for=condition=Ready", f"pod/{name}-3")
    one_node.wait(ns, "--for=condition=Ready", f"tierlogcluster/{name}")

    manifest = {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogTopic",
        "metadata": {"name": "after-scale-up"},
        "spec": {"cluster": name, "partitions": 8},
    }
    one_node.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))

    def every_broker_follows_the_plan() -> bool:
        cluster = json.loads(
            one_node.kubectl("get", "tierlogcluster", name, "-n", ns, "-o", "json")
        )
        planned = cluster.get("status", {}).get("assignment", {}).get("after-scale-up")
        views = _broker_views(one_node, brokers, ["after-scale-up"])
        return (
            bool(planned)
            and sorted(views) == [0, 1, 2, 3]
            and all(
                list(view.leaders["after-scale-up"]) == planned and len(view.brokers) == 4
                for view in views.values()
            )
        )

    owned = _seconds_until("every broker owns as planned", every_broker_follows_the_plan)
    print(f"new topic owned as planned by all 4 brokers {owned:.1f} s after kubectl apply")
    assert known < 20, f"the scale-up reached the brokers after {known:.1f} s\n{one_node.story(ns)}"
    assert owned < 20, (
        f"the new topic was owned as planned after {owned:.1f} s\n{one_node.story(ns)}"
    )
