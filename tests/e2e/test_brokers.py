"""The path a user walks, on a real node: ``helm install`` of the chart with the image
built from the ``Dockerfile``, a 3-broker ``TierlogCluster`` whose claims bind, Jobs in
the cluster producing and consuming through the brokers' per-pod DNS names, and a
cluster tiering to a real MinIO that its pods reach."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
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
