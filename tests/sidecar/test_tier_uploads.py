"""A real sidecar offloads ``remote.storage.enable`` topics to its tier and reports it.

The tier here is the default local-directory store (``tier`` in the data dir); a
replaced pod is a new data dir given a copy of that directory, as a new pod would
point at the same bucket.
"""

from __future__ import annotations

import functools
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import grpc
import pytest

from tests.support.minio import MinioServer
from tests.support.scrape import METRICS, Scrape, get, metrics_address, scrape_sidecar
from tierlog.api.v1 import admin_service_pb2, log_service_pb2
from tierlog.broker.ownership import NO_OWNER
from tierlog.cli.main import main
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest_store import load_view
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Sidecar, SidecarFactory, reason_of

TIERED = {
    "remote_storage_enable": "true",
    "segment_bytes": "2000",
    "local_retention_bytes": "0",
    "file_delete_delay_ms": "0",
}
FAST = (
    METRICS,
    "remote.log.manager.task.interval.ms=100",
    "log.retention.check.interval.ms=200",
)
UPLOAD_SERIES = {
    "tierlog_remote_uploaded_bytes_total",
    "tierlog_remote_uploaded_segments_total",
    "tierlog_remote_upload_duration_seconds_count",
    "tierlog_remote_upload_lag_bytes",
    "tierlog_remote_upload_lag_segments",
    "tierlog_remote_uploads_in_flight",
    "tierlog_remote_upload_in_flight_bytes",
    "tierlog_remote_upload_oldest_in_flight_seconds",
}


def produce(sidecar: Sidecar, batches: int) -> None:
    now_ms = int(time.time() * 1000)
    batch = build_batch([SimpleRecord(b"k", b"v" * 100, now_ms, ())] * 5)  # ~600 bytes
    for _ in range(batches):
        sidecar.log.Produce(log_service_pb2.ProduceRequest(topic="offload", record_batches=batch))


def wait_for(sidecar: Sidecar, done: Callable[[Scrape], bool], timeout_s: float = 30) -> Scrape:
    deadline = time.monotonic() + timeout_s
    while True:
        found = scrape_sidecar(sidecar)
        if done(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def offsets(sidecar: Sidecar) -> tuple[int, int]:
    def at(timestamp: int) -> int:
        request = log_service_pb2.ListOffsetsRequest(topic="offload", timestamp_ms=timestamp)
        return sidecar.log.ListOffsets(request).offset

    return at(-2), at(-1)


def test_a_tiered_topic_is_offloaded_and_a_replaced_pod_continues_it(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(tmp_path / "pod-a", *FAST)
    sidecar.create_topic("offload", 1, **TIERED)
    produce(sidecar, 12)  # ~7200 bytes: three closed 2000-byte segments and the active one
    topic = {"topic": "offload"}
    found = wait_for(
        sidecar,
        lambda s: (
            s.value("tierlog_remote_uploaded_segments_total", **topic) >= 3
            and s.value("tierlog_log_segments", **topic, partition="0") == 1
        ),
    )
    assert found.names() >= UPLOAD_SERIES
    assert found.value("tierlog_remote_uploaded_segments_total", **topic) >= 3
    assert found.value("tierlog_remote_upload_lag_segments", **topic, partition="0") == 0
    assert found.value("tierlog_log_segments", **topic, partition="0") == 1  # local: the active
    view = load_view(LocalDirectoryStore(tmp_path / "pod-a" / "tier"), TopicPartition("offload", 0))
    tiered = view.all_segments()
    assert view.log_start_offset == 0 and len(tiered) >= 3
    assert offsets(sidecar) == (0, 60)
    ready = sidecar.admin.PrepareRestart(admin_service_pb2.PrepareRestartRequest())
    assert (ready.tier_enabled, ready.segments_awaiting_upload, ready.safe) == (True, 0, True)

    # DeleteRecords past the first remote segment deletes it from the tier.
    second = tiered[1].base_offset
    sidecar.log.DeleteRecords(log_service_pb2.DeleteRecordsRequest(topic="offload", offset=second))
    found = wait_for(
        sidecar, lambda s: s.value("tierlog_remote_deleted_segments_total", **topic) >= 1
    )
    assert found.value("tierlog_remote_deleted_segments_total", **topic) == 1
    assert found.value("tierlog_remote_deleted_bytes_total", **topic) == tiered[0].log_size_bytes
    assert offsets(sidecar) == (second, 60)
    store = LocalDirectoryStore(tmp_path / "pod-a" / "tier")
    assert [info.key for info in store.list(tiered[0].key)] == []
    sidecar.stop()

    # A new pod, empty volume, the same bucket: the partition continues at the tier's end.
    (tmp_path / "pod-b").mkdir()
    shutil.copytree(tmp_path / "pod-a" / "tier", tmp_path / "pod-b" / "tier")
    replaced = sidecar_factory(tmp_path / "pod-b", *FAST)
    replaced.create_topic("offload", 1, **TIERED)
    assert offsets(replaced) == (second, view.end_offset)
    produce(replaced, 1)
    assert offsets(replaced) == (second, view.end_offset + 5)


def test_a_restart_waits_for_segments_the_tier_lacks(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(
        tmp_path / "data", METRICS, "remote.log.manager.task.interval.ms=3600000"
    )
    sidecar.create_topic("offload", 1, **TIERED)
    produce(sidecar, 12)  # three closed segments; no upload pass for an hour
    ready = sidecar.admin.PrepareRestart(admin_service_pb2.PrepareRestartRequest())
    assert (ready.tier_enabled, ready.segments_awaiting_upload, ready.safe) == (True, 3, False)
    assert ready.unflushed_messages == 0


def test_a_released_partition_is_rolled_and_uploaded_whole_before_it_counts_as_drained(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    """The operator's plan places the partition on nobody (-1): the broker stops serving
    it, and PrepareRestart sends all of it to the tier, the active segment included,
    without waiting for the uploader's next pass (an hour away here), also when the
    broker was restarted meanwhile (its uploader has not taken in any log yet)."""
    plan = tmp_path / "assignment.json"
    write_plan = functools.partial(_write_plan, plan)
    write_plan([0])
    configs = (
        "remote.log.manager.task.interval.ms=3600000",
        f"tierlog.cluster.assignment.file={plan}",
    )
    sidecar = sidecar_factory(tmp_path / "data", *configs)
    sidecar.create_topic("offload", 1, **TIERED)
    produce(sidecar, 12)  # three closed segments and an active one, none uploaded
    assert offsets(sidecar)[1] == 60
    ready = sidecar.admin.PrepareRestart(admin_service_pb2.PrepareRestartRequest())
    assert (ready.segments_awaiting_upload, ready.safe) == (3, False)  # owned: not rolled

    write_plan([NO_OWNER])
    metadata = admin_service_pb2.MetadataRequest(topics=["offload"])
    deadline = time.monotonic() + 20
    while sidecar.admin.Metadata(metadata).topics[0].partitions[0].leader_id != NO_OWNER:
        assert time.monotonic() < deadline, "the new plan was not picked up"
        time.sleep(0.2)
    leader = sidecar.admin.Metadata(metadata).topics[0].partitions[0]
    assert (leader.leader_id, leader.leader_address) == (NO_OWNER, "")
    with pytest.raises(grpc.RpcError) as refused:
        produce(sidecar, 1)
    assert reason_of(refused.value) == "NOT_LEADER_OR_FOLLOWER"
    sidecar.stop()
    sidecar = sidecar_factory(tmp_path / "data", *configs)

    prepare = admin_service_pb2.PrepareRestartRequest()
    deadline = time.monotonic() + 30
    while not (ready := sidecar.admin.PrepareRestart(prepare)).safe:
        assert time.monotonic() < deadline, f"never drained: {ready}"
        time.sleep(0.2)
    assert ready.segments_awaiting_upload == 0
    view = load_view(LocalDirectoryStore(tmp_path / "data" / "tier"), TopicPartition("offload", 0))
    assert view.end_offset == 60  # everything it acknowledged, the active segment's too


def _write_plan(path: Path, owners: list[int], brokers: tuple[int, ...] = (0,)) -> None:
    addresses = {str(node): f"127.0.0.1:{node + 1}" for node in brokers}  # not dialled here
    document = {"version": 1, "brokers": addresses, "topics": {"offload": owners}}
    path.with_suffix(".tmp").write_text(json.dumps(document))
    path.with_suffix(".tmp").replace(path)


def test_a_broker_back_with_a_stale_volume_leaves_the_new_owners_tier_alone(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    """Broker 1 owned the partition, went away (its volume kept), broker 0 owns it now.
    Broker 1 back with its old log must not claim the partition's tier, which would
    fence broker 0's uploads."""
    plan = tmp_path / "assignment.json"
    shared = (
        *FAST,
        f"tierlog.tier.url={(tmp_path / 'tier').as_uri()}",
        f"tierlog.cluster.assignment.file={plan}",
    )
    place = functools.partial(_write_plan, plan, brokers=(0, 1))
    place([1])
    first = sidecar_factory(tmp_path / "b1", *shared, "node.id=1")
    first.create_topic("offload", 1, **TIERED)
    produce(first, 12)
    wait_until(lambda: tiered_end(first) > 0)
    first.stop()

    place([0])
    owner = sidecar_factory(tmp_path / "b0", *shared, "node.id=0")
    owner.create_topic("offload", 1, **TIERED)  # joins the tier: continues at its end
    back = sidecar_factory(tmp_path / "b1", *shared, "node.id=1")
    time.sleep(1)  # ten of its uploader's passes
    before = tiered_end(owner)
    produce(owner, 12)
    wait_until(lambda: tiered_end(owner) > before)  # still the tier's writer
    assert "no longer the tier's writer" not in owner.output
    back.assert_alive()


def tiered_end(sidecar: Sidecar) -> int:
    request = log_service_pb2.ListOffsetsRequest(topic="offload", timestamp_ms=-5)
    return int(sidecar.log.ListOffsets(request).offset)


def wait_until(done: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def recreate_empty(minio: MinioServer, bucket: str) -> None:
    """Delete the bucket (its objects first, as S3 asks) and create an empty one of the
    same name: what a mistaken cleanup, or a bucket lifecycle rule, leaves."""
    client = minio.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=item["Key"])
    client.delete_bucket(Bucket=bucket)
    client.create_bucket(Bucket=bucket)


def test_a_recreated_bucket_stops_uploads_loudly_until_an_operator_rebases(
    sidecar_factory: SidecarFactory,
    tmp_path: Path,
    minio: MinioServer,
    s3_bucket: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The bucket is deleted and recreated empty while the topic is produced to. The
    sidecar must not write a manifest naming the lost objects: it stops that
    partition's uploads, logs it at ERROR, says it in a metric and in /readyz (still
    200: local data is served), answers reads of the lost offsets with an error rather
    than skipping them, and resumes once the operator runs ``tierlog tier rebase``."""
    s3 = minio.sidecar_tier_configs(s3_bucket, tmp_path / "s3-credentials")
    flags = [
        "--tier-url", f"s3://{s3_bucket}/tier", "--s3-endpoint-url", minio.endpoint_url,
        "--s3-region", minio.region, "--s3-path-style",
        "--s3-credentials", str(tmp_path / "s3-credentials"),
    ]  # fmt: skip
    sidecar = sidecar_factory(
        tmp_path / "data", *FAST, *s3, "remote.log.manager.task.retry.backoff.max.ms=500"
    )
    sidecar.create_topic("offload", 1, **TIERED)
    produce(sidecar, 12)
    topic, partition = {"topic": "offload"}, {"topic": "offload", "partition": "0"}
    uploaded = wait_for(
        sidecar, lambda s: s.value("tierlog_remote_uploaded_segments_total", **topic) >= 3
    )
    assert uploaded.value("tierlog_remote_uploaded_segments_total", **topic) >= 3
    stopped = ("tierlog_remote_upload_stopped_partitions", "manifest_vanished")
    # The series exists at 0 while the tier is healthy (the alert watches it). It is read
    # before the bucket goes: from then on, an upload already due may meet the empty
    # bucket at any moment (this assertion, made after, failed once on a full run).
    assert uploaded.value(stopped[0], reason=stopped[1]) == 0
    # Offset 0 must live in the tier alone when the bucket goes. Its segment's local copy is
    # deleted by a retention pass after the upload (every 200 ms here), and a tier found gone
    # keeps every local segment: a bucket emptied first left offset 0 local and readable
    # (a full run of the suite, 2026-12-02: seven manifest versions in 260 ms, no retention
    # pass between).
    wait_until(lambda: offsets_by(sidecar, -4) > 0)

    recreate_empty(minio, s3_bucket)
    produce(sidecar, 12)  # more closed segments: the next upload meets the empty bucket
    found = wait_for(sidecar, lambda s: s.value(stopped[0], reason=stopped[1]) == 1)
    assert found.value(stopped[0], reason=stopped[1]) == 1
    assert found.value("tierlog_remote_upload_lag_segments", **partition) >= 3  # kept locally

    assert main(["tier", "ls", "offload-0", *flags]) == 0  # no false manifest was written
    listed = capsys.readouterr()
    assert "ManifestVersion: 0\t" in listed.out
    assert "tierlog tier rebase offload-0" in listed.err
    errors = [line for line in sidecar.output.splitlines() if " ERROR " in line]
    assert any("offload-0" in line and "stopping uploads to the tier" in line for line in errors)
    status, body = get(metrics_address(sidecar.output), "/readyz")
    assert status == 200
    assert body.splitlines()[0] == "serving"
    assert "tier unusable for offload-0: manifest_vanished" in body
    with pytest.raises(grpc.RpcError) as lost:  # offset 0 was only in the lost objects
        sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="offload", offset=0))
    assert reason_of(lost.value) == "KAFKA_STORAGE_ERROR"
    assert "no manifest" in cast(grpc.Call, lost.value).details()
    local_start = offsets_by(sidecar, -4)
    assert offsets(sidecar) == (0, 120)

    assert main(["tier", "rebase", "offload-0", *flags]) == 0
    assert "wrote a fresh manifest (version 1)" in capsys.readouterr().out
    resumed = wait_for(
        sidecar,
        lambda s: (
            s.value(stopped[0], reason=stopped[1]) == 0
            and s.value("tierlog_remote_upload_lag_segments", **partition) == 0
        ),
    )
    assert resumed.value("tierlog_remote_upload_lag_segments", **partition) == 0
    assert offsets(sidecar) == (local_start, 120)  # the lost offsets are gone, said so
    assert main(["tier", "verify", "offload-0", *flags]) == 0
    verified = capsys.readouterr().out
    assert f".segment [{local_start}, " in verified.splitlines()[0]
    status, body = get(metrics_address(sidecar.output), "/readyz")
    assert (status, body.strip()) == (200, "serving")
    assert main(["tier", "rebase", "offload-0", *flags]) == 1  # it has a manifest now
    assert "nothing to rebase" in capsys.readouterr().err


def offsets_by(sidecar: Sidecar, timestamp: int) -> int:
    request = log_service_pb2.ListOffsetsRequest(topic="offload", timestamp_ms=timestamp)
    return int(sidecar.log.ListOffsets(request).offset)


def test_wrong_credentials_are_said_in_readiness_and_a_refused_create_is_logged(
    sidecar_factory: SidecarFactory, tmp_path: Path, minio: MinioServer, s3_bucket: str
) -> None:
    """A broker whose tier is unusable still serves its local data (ready), and says why
    in /readyz's detail; a tiered topic it cannot create is refused and logged."""
    s3 = minio.sidecar_tier_configs(s3_bucket, tmp_path / "s3-credentials")
    sidecar = sidecar_factory(tmp_path / "data", *FAST, *s3)
    sidecar.create_topic("offload", 1, **TIERED)
    produce(sidecar, 12)
    sidecar.stop()
    (tmp_path / "s3-credentials").write_text(
        f"access_key_id={minio.access_key_id}\nsecret_access_key=not-the-secret\n"
    )
    back = sidecar_factory(tmp_path / "data", *FAST, *s3)
    address = metrics_address(back.output)
    deadline = time.monotonic() + 30
    while "tier unusable" not in (body := get(address, "/readyz")[1]):
        assert time.monotonic() < deadline, body
        time.sleep(0.1)
    status, body = get(address, "/readyz")
    assert status == 200 and body.splitlines()[0] == "serving"
    assert "tier unusable for offload-0: failing:" in body
    assert "SignatureDoesNotMatch" in body
    assert offsets(back) == (0, 60)  # local data served

    refused = back.admin.CreateTopics(
        admin_service_pb2.CreateTopicsRequest(
            topics=[
                admin_service_pb2.NewTopic(
                    name="more", num_partitions=1, configs={"remote.storage.enable": "true"}
                )
            ]
        )
    )
    assert refused.results[0].error.reason == "KAFKA_STORAGE_ERROR"
    warned = [line for line in back.output.splitlines() if "CreateTopics of 'more'" in line]
    assert warned and " WARNING " in warned[0] and "KAFKA_STORAGE_ERROR" in warned[0]
