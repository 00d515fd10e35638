"""A broker lost with its volume comes back from the bucket it filled (a real MinIO).

A sidecar with a tiered topic (two partitions, an override) is produced to until the
bucket holds every record (the topic's upload bound rolls the active segments), then
killed and its data dir deleted. A new sidecar on an empty data dir with
``tierlog.tier.restore=true`` and the same bucket has the topic, with its partition
count and override, serves every record at its original offset, takes the next
produce at the tier's end, and restarts with the flag still on as any broker does. The
same start on a data dir that holds anything else is refused with DATA_DIR_NOT_EMPTY,
and the bucket's copy of a topic follows its changes and goes with it.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.minio import MinioServer
from tests.support.sidecars import console_script
from tierlog.api.v1 import admin_service_pb2, log_service_pb2
from tierlog.storage.records import SimpleRecord, build_batch, iter_batches
from tierlog.storage.tier.manifest_store import load_view
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.topic_records import load_topic_records
from tierlog.storage.tier.url import open_store
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Sidecar, SidecarFactory

TOPIC = "orders"
PARTITIONS = 2
BATCHES_PER_PARTITION = 6
RECORDS_PER_BATCH = 5
BOUND_MS = 1000
TIERED = {
    "remote_storage_enable": "true",
    "tierlog_remote_segment_max_upload_interval_ms": str(BOUND_MS),
    "retention_ms": "604800001",
}
BROKER = ("remote.log.manager.task.interval.ms=100",)
RESTORE = "tierlog.tier.restore=true"


class Bucket:
    """The MinIO bucket's sidecar configs, and the bucket as a reader sees it."""

    def __init__(self, minio: MinioServer, bucket: str, credentials: Path) -> None:
        self.configs = tuple(minio.sidecar_tier_configs(bucket, credentials))
        options = S3Options(
            endpoint_url=minio.endpoint_url,
            region=minio.region,
            path_style=True,
            credentials_path=credentials,
        )
        self.store: ObjectStore = open_store(f"s3://{bucket}/tier", options)


@pytest.fixture
def bucket(minio: MinioServer, s3_bucket: str, tmp_path: Path) -> Iterator[Bucket]:
    found = Bucket(minio, s3_bucket, tmp_path / "s3-credentials")
    yield found
    found.store.close()


def produce(sidecar: Sidecar, partition: int, seq: int) -> tuple[int, bytes]:
    now_ms = int(time.time() * 1000)  # within retention.ms
    records = [
        SimpleRecord(b"k%d" % i, b"p%d-%d-%d" % (partition, seq, i), now_ms)
        for i in range(RECORDS_PER_BATCH)
    ]
    batch = build_batch(records)
    answer = sidecar.log.Produce(
        log_service_pb2.ProduceRequest(topic=TOPIC, partition=partition, record_batches=batch)
    )
    return answer.base_offset, batch


def fetch_all(sidecar: Sidecar, partition: int) -> dict[int, bytes]:
    """Every batch of the partition from offset 0, by base offset."""
    batches: dict[int, bytes] = {}
    offset = 0
    while True:
        answer = sidecar.log.Fetch(
            log_service_pb2.FetchRequest(topic=TOPIC, partition=partition, offset=offset)
        )
        if offset >= answer.high_watermark:
            return batches
        fetched = answer.record_batches
        for header in iter_batches(fetched):
            batches[header.base_offset] = fetched[header.position : header.end_position]
            offset = header.next_offset


def describe(sidecar: Sidecar) -> admin_service_pb2.DescribeTopicsResponse:
    return sidecar.admin.DescribeTopics(admin_service_pb2.DescribeTopicsRequest(names=[TOPIC]))


def wait_tiered(store: ObjectStore, ends: dict[int, int]) -> None:
    deadline = time.monotonic() + 30 * BOUND_MS / 1000
    for partition, end in ends.items():
        while load_view(store, TopicPartition(TOPIC, partition)).end_offset < end:
            assert time.monotonic() < deadline, f"partition {partition} not in the bucket"
            time.sleep(0.1)


def same_batch(fetched: bytes, produced: bytes) -> bool:
    """The bytes the client chose (outside offset and leader epoch) are the same."""
    return fetched[8:12] == produced[8:12] and fetched[16:] == produced[16:]


def test_a_new_broker_on_an_empty_dir_restores_the_topics_the_bucket_holds(
    sidecar_factory: SidecarFactory, tmp_path: Path, bucket: Bucket
) -> None:
    lost = sidecar_factory(tmp_path / "lost", *BROKER, *bucket.configs)
    lost.create_topic(TOPIC, PARTITIONS, **TIERED)
    topic_id = describe(lost).topics[0].topic_id
    produced: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    for seq in range(BATCHES_PER_PARTITION):
        for partition in range(PARTITIONS):
            base, batch = produce(lost, partition, seq)
            produced[partition][base] = batch
    ends = dict.fromkeys(range(PARTITIONS), BATCHES_PER_PARTITION * RECORDS_PER_BATCH)
    wait_tiered(bucket.store, ends)
    lost.kill()
    shutil.rmtree(lost.data_dir)

    restored = sidecar_factory(tmp_path / "restored", *BROKER, *bucket.configs, RESTORE)
    described = restored.admin.DescribeConfigs(
        admin_service_pb2.DescribeConfigsRequest(topic=TOPIC)
    )
    overrides = {
        entry.name: entry.value
        for entry in described.entries
        if entry.source == admin_service_pb2.CONFIG_SOURCE_TOPIC
    }
    assert overrides == {key.replace("_", "."): value for key, value in TIERED.items()}
    for partition in range(PARTITIONS):
        fetched = fetch_all(restored, partition)
        assert sorted(fetched) == sorted(produced[partition])
        for base, batch in produced[partition].items():
            assert same_batch(fetched[base], batch)
        base, _batch = produce(restored, partition, BATCHES_PER_PARTITION)
        assert base == ends[partition]
    [after] = describe(restored).topics
    assert len(after.partitions) == PARTITIONS
    assert after.topic_id == topic_id  # derived from cluster.id and the name, as before

    restored.stop()  # a restart with the flag still on: the restore was done
    restored.start()
    assert "restored from the tier before" in restored.output
    for partition in range(PARTITIONS):
        assert sorted(fetch_all(restored, partition))[-1] == ends[partition]


def test_a_restore_on_a_data_dir_holding_anything_is_refused(
    sidecar_factory: SidecarFactory, tmp_path: Path, bucket: Bucket
) -> None:
    first = sidecar_factory(tmp_path / "data", *BROKER, *bucket.configs)
    first.create_topic(TOPIC, 1, **TIERED)
    first.stop()
    before = sorted(p.name for p in first.data_dir.rglob("*"))
    command = [console_script("tierlog-sidecar"), "--data-dir", str(first.data_dir)]
    command += ["--listen", "127.0.0.1:0", "--restore-from-tier"]
    for config in (*BROKER, *bucket.configs):
        command += ["--config", config]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert "DATA_DIR_NOT_EMPTY" in refused.stderr
    assert str(first.data_dir) in refused.stderr
    assert "Traceback" not in refused.stderr
    assert sorted(p.name for p in first.data_dir.rglob("*")) == before  # nothing touched


def test_the_bucket_keeps_a_tiered_topic_through_its_changes_and_drops_it_with_the_topic(
    sidecar_factory: SidecarFactory, tmp_path: Path, bucket: Bucket
) -> None:
    sidecar = sidecar_factory(tmp_path / "data", *BROKER, *bucket.configs)
    sidecar.create_topic("local-only", 1)
    sidecar.create_topic(TOPIC, 1, **TIERED)
    [record] = load_topic_records(bucket.store)
    assert (record.name, record.partition_count) == (TOPIC, 1)
    assert record.configs == {key.replace("_", "."): v for key, v in TIERED.items()}
    assert record.topic_id  # as the broker derives it

    sidecar.admin.CreatePartitions(
        admin_service_pb2.CreatePartitionsRequest(topic=TOPIC, total_count=3)
    )
    sidecar.admin.AlterConfigs(
        admin_service_pb2.AlterConfigsRequest(topic=TOPIC, set_configs={"retention.ms": "5"})
    )
    [record] = load_topic_records(bucket.store)
    assert (record.partition_count, record.configs["retention.ms"]) == (3, "5")

    sidecar.admin.DeleteTopics(admin_service_pb2.DeleteTopicsRequest(names=[TOPIC]))
    assert load_topic_records(bucket.store) == []
