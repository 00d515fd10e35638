"""A real sidecar compacts the tier of a compacted, tiered topic (tier on the session's
MinIO): every key reads its latest value after passes, the tier shrinks, the cleaner's
metrics move, and ``kill -9`` of the sidecar while it cleans, or of MinIO during a
pass's swap, never loses a latest value or serves a stale one; the leftovers of killed
passes are swept."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests.storage.tier.tiering import minio_store
from tests.support.minio import MinioServer
from tests.support.scrape import METRICS, scrape_sidecar
from tierlog.api.v1 import log_service_pb2
from tierlog.storage.records import SimpleRecord, build_batch, decode_records, iter_batches
from tierlog.storage.tier.layout import segments_prefix
from tierlog.storage.tier.manifest import SegmentState
from tierlog.storage.tier.manifest_store import ChunkReader, load_manifest, load_view
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Sidecar, SidecarFactory

pytestmark = pytest.mark.go_tools

TOPIC = "table"
TP = TopicPartition(TOPIC, 0)
KEYS = 50
COMPACTED_TIERED = {
    "cleanup_policy": "compact",
    "remote_storage_enable": "true",
    "segment_bytes": "4000",
    "local_retention_bytes": "4000",  # one closed segment stays local beside the tier
    "min_cleanable_dirty_ratio": "0.01",
    "file_delete_delay_ms": "0",
}
FAST = (
    METRICS,
    "remote.log.manager.task.interval.ms=100",
    "log.retention.check.interval.ms=200",
    "remote.log.manager.upload.abandon.ms=1000",
    "remote.log.manager.sweep.interval.ms=500",
)


def tier_flags(minio: MinioServer, bucket: str, tmp_path: Path) -> tuple[str, ...]:
    return minio.sidecar_tier_configs(bucket, tmp_path / "s3-credentials")


def ten_updates(
    first: int, round_number: int, now_ms: int
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Keys ``first`` to ``first + 9`` set to values naming the round, as one batch."""
    value = b"round-%03d-" % round_number + b"v" * 40
    pairs = [(b"key-%02d" % k, value) for k in range(first, first + 10)]
    return pairs, build_batch([SimpleRecord(key, value, now_ms, ()) for key, value in pairs])


def produce_round(sidecar: Sidecar, round_number: int, latest: dict[bytes, bytes]) -> None:
    """Every key updated once; ``latest`` takes the acknowledged values."""
    now_ms = int(time.time() * 1000)
    for first in range(0, KEYS, 10):
        pairs, batch = ten_updates(first, round_number, now_ms)
        sidecar.log.Produce(log_service_pb2.ProduceRequest(topic=TOPIC, record_batches=batch))
        latest.update(pairs)


def latest_read(sidecar: Sidecar) -> dict[bytes, bytes]:
    """Key -> the last value a consumer reading the partition from its start gets."""
    seen: dict[bytes, bytes] = {}
    offset = 0
    while True:
        fetched = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic=TOPIC, offset=offset))
        headers = list(iter_batches(fetched.record_batches))
        if not headers:
            return seen
        for header in headers:
            for record in decode_records(fetched.record_batches, header):
                assert record.key is not None and record.value is not None
                seen[record.key] = record.value
        offset = headers[-1].last_offset + 1
        if offset >= fetched.high_watermark:
            return seen


def test_a_compacted_tiered_topic_is_cleaned_in_the_tier(
    sidecar_factory: SidecarFactory, tmp_path: Path, minio: MinioServer, s3_bucket: str
) -> None:
    sidecar = sidecar_factory(tmp_path / "data", *FAST, *tier_flags(minio, s3_bucket, tmp_path))
    sidecar.create_topic(TOPIC, 1, **COMPACTED_TIERED)
    latest: dict[bytes, bytes] = {}
    for round_number in range(40):  # 2,000 updates over 50 keys
        produce_round(sidecar, round_number, latest)
    store = minio_store(minio, s3_bucket, tmp_path)
    deadline = time.monotonic() + 60
    while True:  # every closed segment tiered (the active one holds under 4000 bytes)
        manifest = load_manifest(store, TP)  # one version: its view and cleaner offset
        view = manifest.view(ChunkReader(store))
        if view.end_offset >= 40 * KEYS - 100 and manifest.cleaner_offset == view.end_offset:
            break  # ... and the whole tier cleaned
        assert time.monotonic() < deadline, sidecar.output
        time.sleep(0.1)
    assert latest_read(sidecar) == latest
    tier_bytes = sum(segment.log_size_bytes for segment in view.all_segments())
    produced_bytes = 40 * (KEYS // 10) * len(ten_updates(0, 0, 0)[1])
    assert tier_bytes * 10 < produced_bytes, (manifest, sidecar.output[-4000:])
    topic = {"topic": TOPIC}
    found = scrape_sidecar(sidecar)
    assert found.value("tierlog_remote_cleaner_passes_total", **topic) >= 1
    assert found.value("tierlog_remote_cleaner_read_bytes_total", **topic) > 0
    written = found.value("tierlog_remote_cleaner_written_bytes_total", **topic)
    removed = found.value("tierlog_remote_cleaner_removed_bytes_total", **topic)
    assert 0 < written < removed
    deadline = time.monotonic() + 30
    while list(found.labelled("tierlog_remote_cleaner_dirty_bytes").values()) != [0]:
        assert time.monotonic() < deadline, found.labelled("tierlog_remote_cleaner_dirty_bytes")
        time.sleep(0.1)  # the lag, as measured after the last swap: nothing dirty
        found = scrape_sidecar(sidecar)
    store.close()


def test_kill_9_while_the_tier_is_cleaned_never_loses_or_stales_a_latest_value(
    sidecar_factory: SidecarFactory, tmp_path: Path, minio: MinioServer, s3_bucket: str
) -> None:
    flags = (*FAST, *tier_flags(minio, s3_bucket, tmp_path))
    sidecar = sidecar_factory(tmp_path / "data", *flags)
    sidecar.create_topic(TOPIC, 1, **COMPACTED_TIERED)
    latest: dict[bytes, bytes] = {}
    chance = random.Random(33)
    round_number = 0
    for _kill in range(5):
        for _ in range(10):
            produce_round(sidecar, round_number, latest)
            round_number += 1
        time.sleep(chance.uniform(0.05, 0.8))  # a kill at some step of the passes under way
        sidecar.kill()
        sidecar = sidecar_factory(tmp_path / "data", *flags)
        assert latest_read(sidecar) == latest
    store = minio_store(minio, s3_bucket, tmp_path)
    deadline = time.monotonic() + 60
    while True:  # the whole tier cleaned, and what killed passes left behind swept
        # Cleaned as of the manifest, not by a pass of the last sidecar: a killed one may
        # have cleaned all there was, leaving the last nothing dirty to pass over.
        manifest = load_manifest(store, TP)
        view = manifest.view(ChunkReader(store))
        named = {segment.key for segment in view.all_segments()}
        stored = {info.key for info in store.list(segments_prefix(TP))}
        cleaned = manifest.cleaner_offset == view.end_offset
        if stored == named and cleaned:
            break
        assert time.monotonic() < deadline, (stored - named, cleaned, sidecar.output[-4000:])
        time.sleep(0.2)
    assert latest_read(sidecar) == latest
    store.close()


def unnamed_objects(store: ObjectStore) -> set[str]:
    """Segment objects the manifest names neither finished nor started: a cleaning pass's
    cleaned objects before its swap commits, or replaced ones before their deletion.
    Listed first: an upload's object is named (started) before it is PUT."""
    stored = {info.key for info in store.list(segments_prefix(TP))}
    manifest = load_manifest(store, TP)
    named = {segment.key for segment in load_view(store, TP).all_segments()}
    named |= {segment.key for segment in manifest.in_state(SegmentState.STARTED)}
    return stored - named


def test_minio_killed_during_the_tier_swap_loses_no_latest_value_and_leaves_no_orphan(
    sidecar_factory: SidecarFactory, tmp_path: Path, minio: MinioServer, s3_bucket: str
) -> None:
    """MinIO dies (SIGKILL) once a pass has PUT cleaned objects that the manifest does not
    name yet: during its swap. With MinIO and then the sidecar restarted, every key reads
    its latest value (none stale), and the killed pass's objects are swept."""
    # The cleaner's throttle stretches a pass over seconds: its swap window is seen.
    flags = (
        *FAST,
        "log.cleaner.io.max.bytes.per.second=20000",
        *tier_flags(minio, s3_bucket, tmp_path),
    )
    sidecar = sidecar_factory(tmp_path / "data", *flags)
    sidecar.create_topic(TOPIC, 1, **COMPACTED_TIERED)
    store = minio_store(minio, s3_bucket, tmp_path)
    latest: dict[bytes, bytes] = {}
    for round_number in range(40):
        produce_round(sidecar, round_number, latest)
    deadline = time.monotonic() + 60
    while not (orphans := unnamed_objects(store)):
        assert time.monotonic() < deadline, sidecar.output[-4000:]
        time.sleep(0.02)
    minio.kill()
    try:
        sidecar.kill()
        minio.start()
        sidecar = sidecar_factory(tmp_path / "data", *flags)
        assert latest_read(sidecar) == latest

        deadline = time.monotonic() + 60
        while unnamed_objects(store) or load_manifest(store, TP).cleaner_offset == 0:
            assert time.monotonic() < deadline, (unnamed_objects(store), sidecar.output[-4000:])
            time.sleep(0.2)  # swept once older than the abandon timeout; the tier cleaned
        assert not orphans & {info.key for info in store.list(segments_prefix(TP))}
        assert latest_read(sidecar) == latest
    finally:
        if not minio.running:  # the session's MinIO, for the tests after this one
            minio.start()
        store.close()
