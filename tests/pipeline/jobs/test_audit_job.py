"""``tierlog-spark audit`` verifies a tier's segments in parallel on the shared session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.pipeline.conftest import SMALL_SEGMENTS, produce, records_for
from tests.pipeline.tiering import tier_closed_segments
from tierlog.pipeline.jobs.audit_job import run_audit
from tierlog.storage.checkpoints import TopicPartition
from tierlog.storage.log import Log
from tierlog.storage.records import V2_HEADER_SIZE, parse_header
from tierlog.storage.tier.local_store import LocalDirectoryStore

pytestmark = pytest.mark.slow


def test_audit_passes_a_sound_tier_and_names_the_segment_with_a_flipped_byte(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = LocalDirectoryStore(tmp_path / "tier")
    for partition in range(2):
        tp = TopicPartition("orders", partition)
        log = Log.open(tmp_path / "logs" / tp.dir_name, SMALL_SEGMENTS)
        produce(log, records_for(1000))
        tier_closed_segments(store, tp, log)
        log.close()

    sound = run_audit(spark, store.url)
    assert sound.ok and len(sound.segments) >= 4

    victim = sound.segments[2]
    path = store.root / next(
        key for key in (info.key for info in store.list("")) if victim.segment_id in key
    )
    data = bytearray(path.read_bytes())
    data[parse_header(bytes(data[:V2_HEADER_SIZE])).size + V2_HEADER_SIZE + 4] ^= 0x01
    path.write_bytes(bytes(data))

    damaged = run_audit(spark, store.url)

    assert not damaged.ok
    assert [s.segment_id for s in damaged.failed] == [victim.segment_id]
    report = json.loads(damaged.to_json())
    assert report["failed_segments"][0]["segment_id"] == victim.segment_id
    assert "fails its CRC" in report["failed_segments"][0]["problems"][0]
