"""Turning tiering off for a topic, as Kafka 3.9+ does it (KIP-950), on a real MinIO.

A tiered topic whose segments are small (each batch or two closes one, the next pass
uploads it) and whose local retention keeps nothing the tier holds, so that its oldest
offsets live only in the bucket. Then:

- ``remote.log.copy.disable=true``: the tier takes no more uploads and stays readable,
  and its retention still deletes from it;
- ``remote.storage.enable=false`` with ``remote.log.delete.on.disable=true``: the tier's
  objects go, the partition starts at its first local offset (OFFSET_OUT_OF_RANGE below)
  and takes produces as before;
- the same, with the bucket refusing every delete and the sidecar killed (-9) while it
  keeps trying, and the manifest heads then gone as a crash after the deletion's first
  step leaves them: after a restart the reads are right and the deletion finishes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from tests.sidecar.conftest import Sidecar, SidecarFactory, reason_of
from tests.support.fault_proxy import FaultProxy
from tests.support.minio import MinioServer
from tierlog.api.v1 import admin_service_pb2, log_service_pb2
from tierlog.storage.records import SimpleRecord, build_batch, iter_batches
from tierlog.storage.tier.layout import manifest_prefix, partition_prefix
from tierlog.storage.tier.manifest_store import load_view
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.url import open_store
from tierlog.storage.topic_partition import TopicPartition

TOPIC = "clicks"
TP = TopicPartition(TOPIC, 0)
RECORDS_PER_BATCH = 5
TIERED = {
    "remote_storage_enable": "true",
    "segment_bytes": "400",  # a segment closes every batch or two
    "local_retention_bytes": "0",  # what the tier holds goes from the disk
}
BROKER = ("remote.log.manager.task.interval.ms=100", "log.retention.check.interval.ms=100")
TURN_OFF = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
WAIT_S = 30


@pytest.fixture
def store(minio: MinioServer, s3_bucket: str, tmp_path: Path) -> Iterator[ObjectStore]:
    options = S3Options(
        endpoint_url=minio.endpoint_url,
        region=minio.region,
        path_style=True,
        credentials_path=minio.write_credentials(tmp_path / "reader-credentials"),
    )
    opened = open_store(f"s3://{s3_bucket}/tier", options)
    yield opened
    opened.close()


def tier_configs(minio: MinioServer, bucket: str, tmp_path: Path, endpoint: str = "") -> list[str]:
    configs = list(minio.sidecar_tier_configs(bucket, tmp_path / "s3-credentials"))
    if endpoint:  # through a fault proxy
        configs = [c for c in configs if not c.startswith("tierlog.tier.s3.endpoint.url=")]
        configs.append(f"tierlog.tier.s3.endpoint.url={endpoint}")
    return configs


def produce(sidecar: Sidecar, seq: int) -> int:
    now_ms = int(time.time() * 1000)
    records = [SimpleRecord(b"k%d" % i, b"v%d-%d" % (seq, i), now_ms) for i in range(5)]
    answer = sidecar.log.Produce(
        log_service_pb2.ProduceRequest(
            topic=TOPIC, partition=0, record_batches=build_batch(records)
        )
    )
    return int(answer.base_offset)


def fetched_offsets(sidecar: Sidecar, offset: int) -> list[int]:
    """The base offsets of the batches one Fetch from ``offset`` answers with."""
    answer = sidecar.log.Fetch(
        log_service_pb2.FetchRequest(topic=TOPIC, partition=0, offset=offset)
    )
    return [header.base_offset for header in iter_batches(answer.record_batches)]


def fetch_error(sidecar: Sidecar, offset: int) -> str:
    with pytest.raises(grpc.RpcError) as raised:
        fetched_offsets(sidecar, offset)
    return reason_of(raised.value)


def log_start(sidecar: Sidecar) -> int:
    described = sidecar.admin.DescribeTopics(admin_service_pb2.DescribeTopicsRequest(names=[TOPIC]))
    return int(described.topics[0].partitions[0].log_start_offset)


def alter(sidecar: Sidecar, set_configs: dict[str, str], delete: tuple[str, ...] = ()) -> None:
    sidecar.admin.AlterConfigs(
        admin_service_pb2.AlterConfigsRequest(
            topic=TOPIC, set_configs=set_configs, delete_configs=delete
        )
    )


def wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def first_local_offset(data_dir: Path) -> int:
    """The base offset of the partition's oldest segment file still on disk."""
    return min(int(path.stem) for path in (data_dir / TP.dir_name).glob("*.log"))


def tiered_with_history(sidecar: Sidecar, store: ObjectStore, batches: int = 8) -> int:
    """A tiered topic whose oldest offsets are only in the bucket; the first local one."""
    sidecar.create_topic(TOPIC, 1, **TIERED)
    for seq in range(batches):
        produce(sidecar, seq)
    wait_for("uploads", lambda: load_view(store, TP).end_offset >= RECORDS_PER_BATCH * 4)
    wait_for("local retention", lambda: first_local_offset(sidecar.data_dir) > 0)
    return first_local_offset(sidecar.data_dir)


def tier_starts_at(store: ObjectStore, offset: int) -> bool:
    return load_view(store, TP).log_start_offset >= offset


def tier_keys(store: ObjectStore) -> list[str]:
    return [info.key for info in store.list(partition_prefix(TP))]


def test_turning_tiering_off_deletes_the_tier_and_the_partition_goes_on_locally(
    sidecar_factory: SidecarFactory,
    minio: MinioServer,
    s3_bucket: str,
    store: ObjectStore,
    tmp_path: Path,
) -> None:
    sidecar = sidecar_factory(tmp_path / "data", *BROKER, *tier_configs(minio, s3_bucket, tmp_path))
    tiered_with_history(sidecar, store)
    assert fetched_offsets(sidecar, 0)[0] == 0  # from the bucket
    end = produce(sidecar, 100) + RECORDS_PER_BATCH

    alter(sidecar, TURN_OFF)
    local_start = log_start(sidecar)
    assert 0 < local_start == first_local_offset(sidecar.data_dir)
    assert fetch_error(sidecar, 0) == "OFFSET_OUT_OF_RANGE"
    wait_for("the tier's objects to go", lambda: not tier_keys(store))

    assert fetched_offsets(sidecar, local_start)[0] == local_start
    assert produce(sidecar, 101) == end
    assert fetched_offsets(sidecar, end) == [end]


def test_a_read_only_tier_takes_no_uploads_and_stays_readable_under_retention(
    sidecar_factory: SidecarFactory,
    minio: MinioServer,
    s3_bucket: str,
    store: ObjectStore,
    tmp_path: Path,
) -> None:
    sidecar = sidecar_factory(tmp_path / "data", *BROKER, *tier_configs(minio, s3_bucket, tmp_path))
    tiered_with_history(sidecar, store)
    # Kafka's rule: a read-only tier's local retention is the total one (-2 says so).
    alter(sidecar, {"remote.log.copy.disable": "true"}, delete=("local.retention.bytes",))
    tier_end = load_view(store, TP).end_offset
    for seq in range(8, 14):  # closed segments above the tier's end
        produce(sidecar, seq)

    assert fetched_offsets(sidecar, 0)[0] == 0  # still served from the bucket
    # The tier's retention goes on: DeleteRecords moves its start, twice, so that the
    # second pass to apply it began after those segments closed; a pass uploads first.
    for start in (RECORDS_PER_BATCH, 2 * RECORDS_PER_BATCH):
        sidecar.log.DeleteRecords(
            log_service_pb2.DeleteRecordsRequest(topic=TOPIC, partition=0, offset=start)
        )
        wait_for(f"the tier to start at {start}", functools.partial(tier_starts_at, store, start))
    assert load_view(store, TP).end_offset == tier_end
    assert fetched_offsets(sidecar, tier_end)[0] == tier_end  # kept locally, not in the tier


def test_a_kill_during_the_deletion_leaves_right_reads_and_the_deletion_finishes_after_restart(
    sidecar_factory: SidecarFactory,
    minio: MinioServer,
    s3_bucket: str,
    store: ObjectStore,
    fault_proxy: FaultProxy,
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    proxied = tier_configs(minio, s3_bucket, tmp_path, endpoint=fault_proxy.url)
    sidecar = sidecar_factory(data_dir, *BROKER, *proxied)
    tiered_with_history(sidecar, store)
    fault_proxy.slow_down(1_000_000, method="POST", path_contains="delete")  # DeleteObjects

    alter(sidecar, TURN_OFF)
    local_start = log_start(sidecar)
    wait_for("a delete to be tried", lambda: fault_proxy.injected["slow_down"] > 0)
    assert fetch_error(sidecar, 0) == "OFFSET_OUT_OF_RANGE"
    sidecar.kill()
    # What a crash after the deletion's first step leaves: no manifest, the rest there.
    store.delete(info.key for info in store.list(manifest_prefix(TP)))
    assert tier_keys(store)

    restarted = sidecar_factory(data_dir, *BROKER, *tier_configs(minio, s3_bucket, tmp_path))
    assert log_start(restarted) == local_start
    assert fetch_error(restarted, 0) == "OFFSET_OUT_OF_RANGE"
    assert fetched_offsets(restarted, local_start)[0] == local_start
    wait_for("the deletion to finish", lambda: not tier_keys(store))
