"""A real sidecar keeps its S3 tier (a real MinIO) within the topic's bound,
``tierlog.remote.segment.max.upload.interval.ms``, idle partition or busy.

The promise: a record waits in the active segment the bound less one pass
(``remote.log.manager.task.interval.ms``), the pass that rolls it uploads it, so it is
in the bucket within the bound plus that upload. The timeouts here are the bound plus
one bound more for the upload on a loaded test machine: without the bound, a segment
of these topics closes only after ``remote.log.segment.roll.ms`` (5 minutes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.minio import MinioServer
from tests.support.scrape import METRICS, scrape_sidecar
from tierlog.api.v1 import admin_service_pb2, log_service_pb2
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.tier.manifest_store import load_view
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.url import open_store
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Sidecar, SidecarFactory

TP = TopicPartition("bounded", 0)
BOUND_MS = 3000
TASK_INTERVAL_MS = 100
DEADLINE_S = 2 * BOUND_MS / 1000  # the bound, and as much again for the upload
BOUNDED = {
    "remote_storage_enable": "true",
    "tierlog_remote_segment_max_upload_interval_ms": str(BOUND_MS),
}
BATCH_RECORDS = 5


@pytest.fixture
def bounded(
    sidecar_factory: SidecarFactory, tmp_path: Path, minio: MinioServer, s3_bucket: str
) -> Iterator[tuple[Sidecar, ObjectStore]]:
    """A sidecar whose tier is ``s3_bucket``, with the topic ``bounded``, and the bucket
    as a reader sees it."""
    credentials = tmp_path / "s3-credentials"
    s3 = minio.sidecar_tier_configs(s3_bucket, credentials)
    sidecar = sidecar_factory(
        tmp_path / "data", METRICS, f"remote.log.manager.task.interval.ms={TASK_INTERVAL_MS}", *s3
    )
    sidecar.create_topic(TP.topic, 1, **BOUNDED)
    options = S3Options(
        endpoint_url=minio.endpoint_url,
        region=minio.region,
        path_style=True,
        credentials_path=credentials,
    )
    store = open_store(f"s3://{s3_bucket}/tier", options)
    yield sidecar, store
    store.close()


def produce(sidecar: Sidecar) -> int:
    """One batch; the log end after it."""
    now_ms = int(time.time() * 1000)
    batch = build_batch([SimpleRecord(b"k", b"v" * 100, now_ms, ())] * BATCH_RECORDS)
    request = log_service_pb2.ProduceRequest(topic=TP.topic, record_batches=batch)
    return int(sidecar.log.Produce(request).base_offset) + BATCH_RECORDS


def tier_end(store: ObjectStore) -> int:
    return load_view(store, TP).end_offset


def test_an_idle_partition_is_in_the_bucket_within_its_bound(
    bounded: tuple[Sidecar, ObjectStore],
) -> None:
    sidecar, store = bounded
    described = sidecar.admin.DescribeConfigs(
        admin_service_pb2.DescribeConfigsRequest(topic=TP.topic)
    )
    shown = {entry.name: (entry.value, entry.source) for entry in described.entries}
    key = "tierlog.remote.segment.max.upload.interval.ms"
    assert shown[key] == (str(BOUND_MS), admin_service_pb2.CONFIG_SOURCE_TOPIC)

    first_append = time.monotonic()
    for _ in range(3):
        log_end = produce(sidecar)
    assert log_end == 15
    labels = {"topic": TP.topic, "partition": "0"}
    found = scrape_sidecar(sidecar)
    assert {"tierlog_remote_upload_lag_offsets", "tierlog_remote_upload_lag_seconds"} <= (
        found.names()
    )
    assert found.value("tierlog_remote_upload_lag_bound_seconds", **labels) == BOUND_MS / 1000
    while tier_end(store) < log_end:
        assert time.monotonic() - first_append < DEADLINE_S, "the records are not in the bucket"
        time.sleep(0.05)
    view = load_view(store, TP)
    assert [(s.base_offset, s.end_offset) for s in view.all_segments()] == [(0, 15)]
    found = scrape_sidecar(sidecar)
    assert found.value("tierlog_remote_upload_lag_offsets", **labels) == 0
    assert found.value("tierlog_remote_upload_lag_seconds", **labels) == 0


def test_a_busy_partition_stays_within_its_bound(bounded: tuple[Sidecar, ObjectStore]) -> None:
    """Produced to without pause for four bounds, in segments that never fill: at every
    look, the bucket holds every record acknowledged longer ago than the deadline."""
    sidecar, store = bounded
    acknowledged: list[tuple[float, int]] = []  # (when, the log end after it)
    looks: list[tuple[float, int]] = []  # (when the bucket was read, its end there)
    start = time.monotonic()
    while time.monotonic() - start < 4 * BOUND_MS / 1000:
        log_end = produce(sidecar)
        acknowledged.append((time.monotonic(), log_end))
        if not looks or time.monotonic() - looks[-1][0] > 0.2:
            looked_at = time.monotonic()
            looks.append((looked_at, tier_end(store)))
    checked = 0
    for looked_at, end in looks:
        due = [log_end for when, log_end in acknowledged if when <= looked_at - DEADLINE_S]
        assert end >= max(due, default=0), f"{looked_at - start:.1f} s in"
        checked += bool(due)
    assert checked >= 5  # looks past the first deadline, each held to it
    found = scrape_sidecar(sidecar)
    labels = {"topic": TP.topic, "partition": "0"}
    assert found.value("tierlog_remote_upload_lag_seconds", **labels) < DEADLINE_S
