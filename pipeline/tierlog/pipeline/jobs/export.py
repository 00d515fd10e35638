"""``tierlog-spark export``: a topic to Parquet, partitioned by topic partition and date,
incrementally and crash-safely (the protocol is ``commit_log``'s).

A run reads, through the data source itself, each partition from where the last
committed run stopped up to the offsets that were the log end when the run started
(records appended meanwhile wait for the next run), writes them to the run's staging
directory with Spark, moves the files into ``partition=<p>/date=<yyyy-mm-dd>/``, syncs
them (Spark's writers do not) and commits. Dates are the UTC dates of the record
timestamps, whatever the session's time zone: a rerun from a session set differently
must not file the same day's records elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrameReader, SparkSession
from pyspark.sql import functions as sf

from tierlog.pipeline.jobs.commit_log import (
    Commit,
    data_file_name,
    last_commit,
    recover,
    staging_dir,
    write_commit,
)
from tierlog.pipeline.options import Subscription, parse_s3_options
from tierlog.pipeline.source import discover
from tierlog.storage.checkpoints import fsync_directory, fsync_file
from tierlog.tools.progress import Track, no_progress

__all__ = ["ExportResult", "run_export"]

FORMAT = "tierlog"  # the JVM source's short name (tierlog.spark.TierlogProvider)

Report = Callable[[str], None]


@dataclass(frozen=True)
class ExportResult:
    run: int  # the committed run, or the last one when there was nothing new
    records: int
    files: tuple[str, ...]
    leftovers_removed: int


def run_export(
    spark: SparkSession,
    paths: Sequence[str],
    topic: str,
    output: Path,
    *,
    fail_on_data_loss: bool = True,
    source_options: Mapping[str, str] | None = None,
    report: Report = print,
    track: Track = no_progress,
    before_commit: Callable[[], None] = lambda: None,
) -> ExportResult:
    """One incremental export run. ``source_options`` go to the data source as they are
    (``s3.*`` for ``s3://`` tiers); ``before_commit`` is the tests' crash point."""
    source_options = dict(source_options or {})
    output.mkdir(parents=True, exist_ok=True)
    removed = recover(output)
    if removed:
        report(f"export: removed {len(removed)} files of an unfinished earlier run")
    previous = last_commit(output)
    run = (previous.run if previous else 0) + 1
    start = dict(previous.next_offsets) if previous else {}
    s3 = parse_s3_options({key.lower(): value for key, value in source_options.items()})
    histories = discover(paths, Subscription(topics=frozenset({topic})), s3=s3)
    end = {history.tp.partition: history.latest for history in histories}
    pending = {p: end[p] - start.get(p, 0) for p in end if end[p] > start.get(p, 0)}
    if not pending:
        report(f"export: {topic} has nothing new since run {run - 1}")
        return ExportResult(run - 1, 0, (), len(removed))
    for partition in sorted(pending):
        report(
            f"export: run {run}: {topic}-{partition} offsets "
            f"{start.get(partition, 'earliest')}..{end[partition]}"
        )
    staging = staging_dir(output, run)
    reader = spark.read.format(FORMAT).options(**source_options)
    reader = reader.option("failOnDataLoss", str(fail_on_data_loss).lower())
    _write_staging(reader, paths, topic, start, end, staging)
    files = _move_into_place(staging, output, run, track)
    records = sum(pq.read_metadata(output / name).num_rows for name in files)
    before_commit()
    write_commit(output, Commit(run, topic, {**start, **end}, files, records))
    report(f"export: run {run} committed: {records} records in {len(files)} files")
    return ExportResult(run, records, files, len(removed))


def _write_staging(
    reader: DataFrameReader,
    paths: Sequence[str],
    topic: str,
    start: dict[int, int],
    end: dict[int, int],
    staging: Path,
) -> None:
    starting = {topic: {str(p): start.get(p, -2) for p in end}}
    ending = {topic: {str(p): o for p, o in end.items()}}
    frame = (
        reader.option("subscribe", topic)
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .load(list(paths))
        .withColumn("date", _utc_date(sf.col("timestamp")))
    )
    frame.write.partitionBy("partition", "date").mode("overwrite").parquet(str(staging))


MS_PER_DAY = 86_400_000


def _utc_date(timestamp: Column) -> Column:
    """The UTC date of ``timestamp``, computed from the instant (the session time zone
    is what ``date_format`` and casts to date would use)."""
    return sf.date_from_unix_date(sf.floor(sf.unix_millis(timestamp) / MS_PER_DAY).cast("int"))


def _move_into_place(staging: Path, output: Path, run: int, track: Track) -> tuple[str, ...]:
    moved = []
    sources = sorted(staging.glob("partition=*/date=*/*.parquet"))
    with track(f"export: run {run}: placing files", len(sources), "file") as advance:
        for source in sources:
            target_dir = output / source.parent.parent.name / source.parent.name
            target_dir.mkdir(parents=True, exist_ok=True)
            target = target_dir / data_file_name(run, source.name)
            source.replace(target)
            fsync_file(target)
            moved.append(str(target.relative_to(output)))
            advance(1)
    for directory in {output / Path(name).parent for name in moved}:
        fsync_directory(directory)
    return tuple(moved)
