"""``tierlog.spark.io.S3Source``: a tiered segment larger than the reader's chunk is read
in several ranged GETs, each next one fetched while the last is decoded, and every
record comes back once, in order, from the real MinIO."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from tests.pipeline.conftest import Tier
from tests.pipeline.tiering import tier_closed_segments
from tests.storage.conftest import T0, config
from tierlog.storage.log import Log
from tierlog.storage.records import CompressionType, SimpleRecord, build_batch
from tierlog.storage.topic_partition import TopicPartition

pytestmark = pytest.mark.slow

TP = TopicPartition("big", 0)
CHUNK_BYTES = 8 * 1024 * 1024  # tierlog.spark.read.BatchWalker.CHUNK_BYTES
VALUE_BYTES = 64 * 1024


def test_a_segment_of_many_chunks_reads_every_record_once(
    spark: SparkSession, tmp_path: Path, s3_tier: Tier
) -> None:
    log = Log.open(tmp_path / TP.dir_name, config(segment_bytes=3 * CHUNK_BYTES))
    try:
        count = 0
        while log.segments[0] is log.active_segment or len(log.segments) < 2:
            records = [
                SimpleRecord(b"%d" % (count + i), bytes([i]) * VALUE_BYTES, T0 + count + i)
                for i in range(8)
            ]
            log.append(build_batch(records, compression=CompressionType.NONE))
            count += len(records)
        store = s3_tier.open()
        try:
            tiered_end = tier_closed_segments(store, TP, log).uploaded_end_offset
        finally:
            store.close()
    finally:
        log.close()
    assert log.segments[0].size > 2 * CHUNK_BYTES

    frame = (
        spark.read.format("tierlog")
        .option("subscribe", TP.topic)
        .options(**s3_tier.options)
        .load(s3_tier.url)
    )
    summary = frame.agg(
        sf.count("*"), sf.min("offset"), sf.max("offset"), sf.sum(sf.length("value"))
    ).first()

    assert tuple(summary or ()) == (tiered_end, 0, tiered_end - 1, tiered_end * VALUE_BYTES)
    keys = [row.key for row in frame.orderBy("offset").select("key").collect()]
    assert keys == [b"%d" % offset for offset in range(tiered_end)]
