"""The path a user walks, on a real node: ``helm install`` of the chart with the image
built from the ``Dockerfile``, a 3-broker ``TierlogCluster`` whose claims bind, Jobs in
the cluster producing and consuming through the brokers' per-pod DNS names, and a
cluster tiering to a real MinIO that its pods reach."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import Node
from tests.support.cluster.layout import GATEWAY
from tests.support.minio import MinioServer

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
RECORDS = 1000


@dataclass(frozen=True)
class Brokers:
    namespace: str
    name: str  # the TierlogCluster's

    @property
    def servers(self) -> str:
        """The per-broker names of the headless Service, as clients in the cluster use them."""
        return ",".join(f"{self.name}-{i}.{self.name}-brokers:9092" for i in range(3))


@pytest.fixture(scope="module")
def brokers(one_node: Node, operator: str) -> Iterator[Brokers]:
    """``deploy/examples/cluster-minimal.yaml`` (3 brokers) in a namespace of its own, Ready."""
    namespace = one_node.create_namespace("brokers")
    try:
        cluster = yaml.safe_load(
            (REPO / "deploy" / "examples" / "cluster-minimal.yaml").read_text()
        )
        started = time.monotonic()
        one_node.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(cluster))
        name = cluster["metadata"]["name"]
        one_node.wait(namespace, "--for=condition=Ready", f"tierlogcluster/{name}")
        print(f"\n3-broker cluster Ready {time.monotonic() - started:.1f} s after kubectl apply")
        yield Brokers(namespace, name)
    finally:
        # Waited for: the operator (still installed) removes its finalizers.
        one_node.kubectl("delete", "namespace", namespace, "--timeout=180s")


def _topic(
    one_node: Node, brokers: Brokers, topic: str, config: dict[str, object] | None = None
) -> None:
    manifest = {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogTopic",
        "metadata": {"name": topic},
        "spec": {"cluster": brokers.name, "partitions": 3, "config": config or {}},
    }
    one_node.kubectl("apply", "-n", brokers.namespace, "-f", "-", input=json.dumps(manifest))
    one_node.wait(brokers.namespace, "--for=condition=Ready", f"tierlogtopic/{topic}")


def _run_job(one_node: Node, brokers: Brokers, name: str, script: str) -> str:
    """A Job of the node's image running ``script`` with ``TIERLOG_SERVER`` set; its log."""
    container: dict[str, Any] = {
        "name": "client",
        "image": one_node.image,
        "env": [{"name": "TIERLOG_SERVER", "value": brokers.servers}],
        "command": ["sh", "-c", script],
        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": {"runAsUser": 10001, "runAsNonRoot": True},
                    "containers": [container],
                }
            },
        },
    }
    one_node.kubectl("apply", "-n", brokers.namespace, "-f", "-", input=json.dumps(job))
    one_node.wait(brokers.namespace, "--for=condition=Complete", f"job/{name}")
    return one_node.kubectl("logs", "-n", brokers.namespace, f"job/{name}")


def _produce(topic: str, records: int = RECORDS) -> str:
    return f"tierlog perf produce --num-records {records} --record-size 100 --throughput -1 {topic}"


def _count(topic: str, records: int = RECORDS) -> str:
    """Prints how many records a consumer from the beginning gets (it stops at ``records``)."""
    return (
        f"tierlog consume --from-beginning --max-messages {records} --timeout-ms 60000 {topic}"
        " | wc -l"
    )


def test_a_three_broker_cluster_binds_its_claims_and_serves_a_job_by_dns_names(
    one_node: Node, brokers: Brokers
) -> None:
    claims = json.loads(one_node.kubectl("get", "pvc", "-n", brokers.namespace, "-o", "json"))
    assert sorted(c["status"]["phase"] for c in claims["items"]) == ["Bound"] * 3

    _topic(one_node, brokers, "orders")
    output = _run_job(
        one_node, brokers, "produce-consume", f"{_produce('orders')} && {_count('orders')}"
    )
    assert f"{RECORDS} records sent" in output, one_node.story(brokers.namespace)
    assert output.strip().splitlines()[-1] == str(RECORDS), one_node.story(brokers.namespace)


def test_a_deleted_broker_pod_comes_back_on_its_claim_with_every_record(
    one_node: Node, brokers: Brokers
) -> None:
    _topic(one_node, brokers, "restarts")
    _run_job(one_node, brokers, "produce-before-restart", _produce("restarts"))
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
    output = _run_job(one_node, brokers, "consume-after-restart", _count("restarts"))
    assert output.strip().splitlines()[-1] == str(RECORDS), one_node.story(brokers.namespace)


@pytest.fixture(scope="module")
def tier(one_node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """A real MinIO on the bridge address (so after the node made it), where pods reach it."""
    server = MinioServer(tmp_path_factory.mktemp("minio") / "data", host=GATEWAY).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_tiered_cluster_uploads_closed_segments_to_minio_and_serves_every_record(
    one_node: Node, operator: str, tier: MinioServer
) -> None:
    namespace, bucket = one_node.create_namespace("tiered"), tier.create_bucket("e2e")
    credentials = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "tier-keys"},
        "stringData": {
            "AWS_ACCESS_KEY_ID": tier.access_key_id,
            "AWS_SECRET_ACCESS_KEY": tier.secret_access_key,
        },
    }
    cluster = {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogCluster",
        "metadata": {"name": "tiered"},
        "spec": {
            "brokers": 3,
            "tier": {
                "url": f"s3://{bucket}/e2e",
                "s3": {
                    "endpoint": tier.endpoint_url,
                    "region": tier.region,
                    "forcePathStyle": True,
                    "credentialsSecret": {"name": "tier-keys"},
                },
            },
        },
    }
    brokers = Brokers(namespace, "tiered")
    records = 3000
    try:
        for manifest in (credentials, cluster):
            one_node.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
        one_node.wait(namespace, "--for=condition=Ready", "tierlogcluster/tiered")
        topic_config: dict[str, object] = {"remote.storage.enable": True, "segment.bytes": 65536}
        _topic(one_node, brokers, "tiered-orders", topic_config)
        _run_job(one_node, brokers, "produce-tiered", _produce("tiered-orders", records))

        # An upload pass runs every 30 s (remote.log.manager.task.interval.ms, which the
        # CRD does not expose): wait for the first one that finds closed segments.
        deadline, uploaded = time.monotonic() + 180, 0
        while time.monotonic() < deadline and uploaded == 0:
            listed = tier.client().list_objects_v2(Bucket=bucket, Prefix="e2e/")
            uploaded = listed.get("KeyCount", 0)
            time.sleep(1)  # polling the bucket for the brokers' first upload pass
        assert uploaded > 0, f"nothing uploaded to {bucket}:\n{one_node.story(namespace)}"

        output = _run_job(one_node, brokers, "consume-tiered", _count("tiered-orders", records))
        assert output.strip().splitlines()[-1] == str(records), one_node.story(namespace)
    finally:
        one_node.kubectl("delete", "namespace", namespace, "--timeout=180s")
