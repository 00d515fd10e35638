"""A cluster lost with its volumes, restored from its bucket, on the real node.

A 3-broker ``TierlogCluster`` with replication factor 3 tiers a topic to MinIO until
the bucket holds every record (the topic's upload bound rolls the active segment);
then its namespace goes (the cluster, its claims, its volumes freed). A new cluster of
the same name in a new namespace, with ``spec.tier.restore`` and the same bucket,
starts on empty volumes with an empty partition-state store: it has the topic without
any ``TierlogTopic``, a consumer reads every record the tier held, and a producer's
records land at the tier's end offset and after.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Node
from tests.e2e.workloads import (
    Brokers,
    count_records,
    make_topic,
    produce_records,
    run_job,
    tiered_cluster,
)
from tests.support.minio import MinioServer
from tierlog.storage.tier.manifest_store import load_view
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.url import open_store
from tierlog.storage.topic_partition import TopicPartition

pytestmark = pytest.mark.e2e

CLUSTER, TOPIC = "vault", "ledger"
RECORDS, MORE = 3000, 500
BOUND_MS = 5000  # the topic's upload bound: the active segment reaches the bucket too
TOPIC_CONFIG: dict[str, object] = {
    "remote.storage.enable": True,
    "segment.bytes": 65536,
    "tierlog.remote.segment.max.upload.interval.ms": BOUND_MS,
}
REPLICATED = {"replication": {"factor": 3, "minInsyncReplicas": 2}}
# An upload pass runs every 30 s (remote.log.manager.task.interval.ms, which the CRD
# does not expose): the bound, two passes and as much again.
TIERED_WITHIN_S = 2 * (BOUND_MS / 1000 + 2 * 30)


def tier_end(tier: MinioServer, bucket: str, credentials: Path) -> int:
    """Where the bucket's copy of the topic's partition ends (as a restore reads it)."""
    options = S3Options(
        endpoint_url=tier.endpoint_url,
        region=tier.region,
        path_style=True,
        credentials_path=tier.write_credentials(credentials),
    )
    store = open_store(f"s3://{bucket}/{CLUSTER}", options)
    try:
        return load_view(store, TopicPartition(TOPIC, 0)).end_offset
    finally:
        store.close()


def latest_offset(node: Node, brokers: Brokers, job: str) -> str:
    """``TOPIC:0:OFFSET``, asked again while the partition has no leader yet."""
    ask = f"tierlog get-offsets --topic {TOPIC}"
    script = f"for i in $(seq 30); do {ask} && exit 0; sleep 2; done; exit 1"
    return run_job(node, brokers, job, script).strip().splitlines()[-1]


# Two clusters one after the other, and the tier's upload passes between them: more
# than the suite's 600 s, which would cut a failing job's wait short of its story.
@pytest.mark.timeout(1200)
def test_a_replicated_cluster_lost_with_its_volumes_is_restored_from_its_bucket(
    one_node: Node, operator: str, tier: MinioServer, tmp_path: Path
) -> None:
    credentials = tmp_path / "s3-credentials"
    with tiered_cluster(one_node, tier, CLUSTER, spec=REPLICATED) as lost:
        make_topic(one_node, lost, TOPIC, TOPIC_CONFIG, partitions=1)
        run_job(one_node, lost, "produce-before", produce_records(TOPIC, RECORDS))
        deadline = time.monotonic() + TIERED_WITHIN_S
        while tier_end(tier, lost.bucket, credentials) < RECORDS:
            assert time.monotonic() < deadline, one_node.story(lost.namespace)
            time.sleep(1)  # polling the bucket for the leader's uploads
    # The namespace is gone: the cluster, its partition-state store and its volumes.

    with tiered_cluster(
        one_node, tier, CLUSTER, bucket=lost.bucket, spec=REPLICATED, restore=True
    ) as restored:
        namespace = restored.namespace
        assert latest_offset(one_node, restored, "offsets-restored") == f"{TOPIC}:0:{RECORDS}"
        counted = run_job(one_node, restored, "count-restored", count_records(TOPIC, RECORDS))
        assert counted.strip().splitlines()[-1] == str(RECORDS), one_node.story(namespace)

        run_job(one_node, restored, "produce-after", produce_records(TOPIC, MORE))
        after = latest_offset(one_node, restored, "offsets-after")
        assert after == f"{TOPIC}:0:{RECORDS + MORE}", one_node.story(namespace)
        total = RECORDS + MORE
        counted = run_job(one_node, restored, "count-after", count_records(TOPIC, total))
        assert counted.strip().splitlines()[-1] == str(total), one_node.story(namespace)
