"""``tierlog-spark audit`` verifies a tier's segments in parallel on the shared session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.pipeline.conftest import SMALL_SEGMENTS, produce, records_for
from tests.pipeline.tiering import flip_a_byte_of_the_second_segment, tier_closed_segments
from tierlog.pipeline.jobs.audit_job import run_audit
from tierlog.storage.log import Log
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.topic_partition import TopicPartition

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
    assert sound.exit_code == 0, sound.to_json()
    segments = sum(audit.report.segments for audit in sound.partitions)
    assert len(sound.partitions) == 2 and segments >= 4

    victim = flip_a_byte_of_the_second_segment(store, TopicPartition("orders", 1))

    damaged = run_audit(spark, store.url)

    assert damaged.exit_code == 1
    assert list(damaged.problems) == [victim]
    report = json.loads(damaged.to_json())
    assert report["segments_checked"] == segments
    # dump-log's words for a batch whose CRC does not match its bytes
    assert report["problems"][victim][0].startswith("Invalid batches in")
