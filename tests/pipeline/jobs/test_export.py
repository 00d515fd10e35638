"""``tierlog-spark export`` on the shared session: incremental, idempotent, crash-safe."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.pipeline.conftest import SMALL_SEGMENTS, produce, records_for
from tierlog.pipeline.jobs.commit_log import last_commit
from tierlog.pipeline.jobs.export import run_export
from tierlog.storage.log import Log
from tierlog.storage.topic_partition import TopicPartition

pytestmark = pytest.mark.slow

TOPIC = "orders"


class SimulatedCrash(Exception):
    pass


def crash() -> None:
    raise SimulatedCrash


def exported(spark: SparkSession, output: Path) -> list[tuple[int, int]]:
    rows = spark.read.parquet(str(output)).select("partition", "offset").collect()
    return sorted((row.partition, row.offset) for row in rows)


def test_reruns_export_only_what_is_new_and_a_crash_leaves_nothing_behind(
    spark: SparkSession, tmp_path: Path
) -> None:
    logs = [
        Log.open(tmp_path / "logs" / TopicPartition(TOPIC, p).dir_name, SMALL_SEGMENTS)
        for p in range(2)
    ]
    for log in logs:
        produce(log, records_for(150))
    output = tmp_path / "parquet"
    paths = [str(tmp_path / "logs")]
    lines: list[str] = []

    first = run_export(spark, paths, TOPIC, output, report=lines.append)
    assert (first.run, first.records) == (1, 300)
    assert exported(spark, output) == [(p, o) for p in range(2) for o in range(150)]
    assert any("committed: 300 records" in line for line in lines)
    assert sorted(path.name for path in output.iterdir()) == [
        "_tierlog_export",
        "partition=0",
        "partition=1",
    ]
    assert all(
        name.startswith("partition=") and "/date=2023-11-14/run-00000001-" in name
        for name in first.files
    )

    again = run_export(spark, paths, TOPIC, output, report=lines.append)
    assert (again.run, again.records, again.files) == (1, 0, ())

    produce(logs[1], records_for(50, start=150))
    with pytest.raises(SimulatedCrash):
        run_export(spark, paths, TOPIC, output, report=lines.append, before_commit=crash)
    assert last_commit(output) is not None and last_commit(output).run == 1  # type: ignore[union-attr]
    assert list(output.glob("partition=1/date=*/run-00000002-*"))  # the crashed run's files

    recovered = run_export(spark, paths, TOPIC, output, report=lines.append)
    assert (recovered.run, recovered.records, recovered.leftovers_removed) == (2, 50, 1)
    expected = [(0, o) for o in range(150)] + [(1, o) for o in range(200)]
    assert exported(spark, output) == expected
    for log in logs:
        log.close()


def test_dates_are_utc_dates_whatever_the_session_time_zone(
    spark: SparkSession, tmp_path: Path
) -> None:
    """T0 is 2023-11-14 22:13 UTC, already the 15th in Tokyo."""
    log = Log.open(tmp_path / "logs" / TopicPartition(TOPIC, 0).dir_name, SMALL_SEGMENTS)
    produce(log, records_for(20))
    log.close()
    zone = spark.conf.get("spark.sql.session.timeZone")
    assert zone is not None
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try:
        result = run_export(spark, [str(tmp_path / "logs")], TOPIC, tmp_path / "parquet")
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)

    assert result.records == 20
    assert {Path(name).parent.name for name in result.files} == {"date=2023-11-14"}
