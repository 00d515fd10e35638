"""Pipeline benchmarks (issue 7): decoding segments into Arrow, and Spark scans.

Run with ``.venv/bin/python tests/benchmarks/pipeline_bench.py``. In one run:

1. records/s on one core decoding 100-byte records (10-byte key, 90-byte value) from
   local segments into Arrow batches, uncompressed and lz4: plan + ``decode_split``
   exactly as a Spark task runs them, without Spark;
2. a full scan of a ``--scan-mib`` topic (1 GiB by default) from local disk through
   ``spark.read.format("tierlog")`` on ``local[2]``, and Spark reading the same records
   from Parquet (written from the same topic beforehand), with the same aggregate over
   the same columns: the ratio to beat.

Decode figures are medians of ``--runs`` repetitions, scans of ``--scan-runs``. The
machine is shared: the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from tierlog.pipeline import register
from tierlog.pipeline.arrow_batches import decode_split
from tierlog.pipeline.options import parse_options
from tierlog.pipeline.segments import opened
from tierlog.pipeline.source import plan_batch
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import CompressionType, SimpleRecord, build_batch

MiB = 1024 * 1024
RECORDS_PER_BATCH = 500
TEMPLATES = 16
SCAN_AGGREGATE = (
    "count(*) AS records",
    "sum(length(key)) AS key_bytes",
    "sum(length(value)) AS value_bytes",
    "max(offset) AS last_offset",
    "max(timestamp) AS last_timestamp",
)


def templates(codec: CompressionType) -> list[bytes]:
    """Distinct batches of 100-byte records (random values, so lz4 has work to do)."""
    now = int(time.time() * 1000)
    return [
        build_batch(
            [
                SimpleRecord(b"key-%06d" % i, os.urandom(90), now + i)
                for i in range(RECORDS_PER_BATCH)
            ],
            compression=codec,
        )
        for _ in range(TEMPLATES)
    ]


def write_topic(log_dir: Path, topic: str, codec: CompressionType, total_bytes: int) -> int:
    """One partition of about ``total_bytes`` of log; returns its record count."""
    log = Log.open(log_dir / f"{topic}-0", LogConfig())
    batches = templates(codec)
    written = 0
    records = 0
    while written < total_bytes:
        batch = batches[records // RECORDS_PER_BATCH % TEMPLATES]
        log.append(batch)
        written += len(batch)
        records += RECORDS_PER_BATCH
    log.close()
    return records


def median_of(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def decode_rate(log_dir: Path, topic: str, records: int) -> float:
    """Records/s on this one thread: plan the topic, decode every split to Arrow."""
    started = time.perf_counter()
    decoded = 0
    for split in plan_batch(parse_options({"path": str(log_dir), "subscribe": topic})):
        with opened(split.segment) as reader:
            decoded += sum(batch.num_rows for batch in decode_split(split, reader))
    elapsed = time.perf_counter() - started
    assert decoded == records, (decoded, records)
    return records / elapsed


def spark_session() -> SparkSession:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tierlog-pipeline-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.python.authenticate.socketTimeout", "180s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def scan_seconds(frame: DataFrame) -> float:
    started = time.perf_counter()
    frame.selectExpr(*SCAN_AGGREGATE).collect()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--decode-mib", type=int, default=64)
    parser.add_argument("--scan-mib", type=int, default=1024)
    parser.add_argument("--scan-runs", type=int, default=1, help="full scans are minutes each")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="pipeline-bench-", dir=args.dir))
    try:
        run(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run(args: argparse.Namespace, scratch: Path) -> None:
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f} at start, {time.strftime('%Y-%m-%d')}"
    )
    print("\n| decode 100-byte records to Arrow, one core | records/s | MB/s of records |")
    print("|---|---|---|")
    for codec in (CompressionType.NONE, CompressionType.LZ4):
        log_dir = scratch / f"decode-{codec.name.lower()}"
        records = write_topic(log_dir, "bench", codec, args.decode_mib * MiB)
        rate = median_of(args.runs, functools.partial(decode_rate, log_dir, "bench", records))
        print(
            f"| {codec.name.lower()} ({records:,} records) | {rate:,.0f} | {rate * 100 / 1e6:.1f} |"
        )

    log_dir = scratch / "scan"
    records = write_topic(log_dir, "scan", CompressionType.NONE, args.scan_mib * MiB)
    spark = spark_session()
    source = (
        spark.read.format("tierlog")
        .option("subscribe", "scan")
        .option("minPartitions", "8")
        .load(str(log_dir))
    )
    parquet = scratch / "scan.parquet"
    source.write.parquet(str(parquet))
    from_parquet = spark.read.parquet(str(parquet))
    segments_seconds = []
    parquet_seconds = []
    for _ in range(args.scan_runs):  # interleaved: both see the same machine
        segments_seconds.append(scan_seconds(source))
        parquet_seconds.append(scan_seconds(from_parquet))
    segments = statistics.median(segments_seconds)
    from_files = statistics.median(parquet_seconds)
    print(
        f"\n| full scan, {args.scan_mib} MiB topic ({records:,} records), local[2] "
        "| seconds | records/s | vs Parquet |"
    )
    print("|---|---|---|---|")
    print(
        f"| tierlog segments, local disk | {segments:.1f} | {records / segments:,.0f} | "
        f"{from_files / segments:.2f} |"
    )
    print(
        f"| Parquet of the same records | {from_files:.1f} | {records / from_files:,.0f} | 1.00 |"
    )
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    spark.stop()


if __name__ == "__main__":
    main()
