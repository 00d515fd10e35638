"""``TierlogScanBuilder``: what Spark pushes into the JVM scan. A query reads only the
columns it needs (a pruned column is never copied out of its batch), and its filters
reach the Python planner, which prunes splits with them while Spark checks them again."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from tests.pipeline.conftest import expected_rows, write_log
from tests.storage.conftest import T0
from tierlog.storage.topic_partition import TopicPartition

pytestmark = pytest.mark.slow

TOPIC = "orders"
TP0 = TopicPartition(TOPIC, 0)


def scan_of(frame: DataFrame) -> Any:
    """The JVM scan of the frame's optimized plan (its one leaf)."""
    leaves = frame._jdf.queryExecution().optimizedPlan().collectLeaves()
    assert leaves.size() == 1
    return leaves.head().scan()


def test_a_query_of_keys_reads_only_the_keys(spark: SparkSession, tmp_path: Path) -> None:
    records = write_log(tmp_path, TP0, 200)  # every codec, null keys among them
    frame = spark.read.format("tierlog").option("subscribe", TOPIC).load(str(tmp_path))

    keys = frame.select("key")

    assert scan_of(keys).readSchema().simpleString() == "struct<key:binary>"
    assert sorted(row.key for row in keys.collect() if row.key) == sorted(
        r.key for r in records if r.key
    )


def test_offsets_and_timestamps_are_read_without_keys_and_values(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Kafka's iterator that skips keys and values (compressed v2 batches) is used when
    neither they nor the headers are asked for: the other columns are the same."""
    records = write_log(tmp_path, TP0, 200)
    frame = spark.read.format("tierlog").option("subscribe", TOPIC).load(str(tmp_path))

    light = frame.select("offset", "timestamp", "timestampType", "partition", "topic")

    assert sorted(scan_of(light).readSchema().fieldNames()) == [
        "offset",
        "partition",
        "timestamp",
        "timestampType",
        "topic",
    ]
    moment = datetime.datetime.fromtimestamp
    assert [tuple(row) for row in light.orderBy("offset").collect()] == [
        (offset, moment(ts / 1000, datetime.UTC).replace(tzinfo=None), kind, 0, TOPIC)
        for _, _, _, _, offset, ts, kind in expected_rows(TP0, records)
    ]
    assert scan_of(frame.groupBy().count()).readSchema().simpleString() == "struct<>"
    assert frame.count() == 200


def test_filters_reach_the_planner_and_spark_still_checks_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    write_log(tmp_path, TP0, 300)
    frame = spark.read.format("tierlog").option("subscribe", TOPIC).load(str(tmp_path))
    since = datetime.datetime.fromtimestamp((T0 + 10 * 250) / 1000, datetime.UTC)

    query = frame.where(
        (sf.col("offset") >= 100) & (sf.col("timestamp") >= sf.lit(since)) & (sf.length("key") > 0)
    )

    assert query.rdd.getNumPartitions() < frame.rdd.getNumPartitions()
    assert [row.offset for row in query.orderBy("offset").collect()] == [
        o for o in range(250, 300) if o % 17 != 5
    ]
