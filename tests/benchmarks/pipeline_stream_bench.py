"""Issue 21's streaming figure: do micro-batches keep up with a producer at full speed?

Run from the repository's root with
``.venv/bin/python -m tests.benchmarks.pipeline_stream_bench``. In one run:

1. a ``tierlog-sidecar`` on loopback with a fresh data dir, one topic of one partition;
2. a streaming query on ``local[2]``: ``spark.readStream.format("tierlog")`` over the
   sidecar's data dir from the earliest offset, ``minPartitions`` 2 (one task per core),
   into Spark's ``noop`` sink, micro-batches back to back (Spark's default trigger);
3. a warm-up (``--warm-up-records``, read to the end before measuring: a stream that
   runs for hours has its Python workers started and its JVM compiled, which the first
   micro-batch of a fresh query spends seconds on);
4. ``tierlog perf produce`` at full speed (``--throughput -1``): ``--records`` records
   of ``--record-size`` bytes in 1 MiB batches with ``acks=1``, the sidecar's peak
   (docs/BENCHMARKS.md, "gRPC sidecar vs Kafka").

Every ``--sample-ms`` while the producer runs the lag is sampled: the log's end (its
last stable offset, as the source lists it) minus the next offset the query has
committed. Printed: the producer's rate, the lag's median and maximum in records and in
seconds of the producer's rate, and how long the query took to reach the log's end once
the producer stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from pyspark.sql.streaming.query import StreamingQuery

from tests.benchmarks.kafka_comparison_bench import TIERLOG_BIN, parse_produce, sidecar
from tests.benchmarks.pipeline_bench import spark_session
from tests.benchmarks.scratch import machine_line, run_in_scratch
from tierlog.client import AdminClient
from tierlog.pipeline.options import parse_options
from tierlog.pipeline.source import discover, latest_offsets

TOPIC = "stream"
BATCH_BYTES = 1024 * 1024


def log_end(data_dir: Path) -> int:
    """The partition's last stable offset, listed as the source lists it."""
    options = parse_options({"path": str(data_dir), "subscribe": TOPIC}, streaming=True)
    offsets = latest_offsets(discover(options.paths, options.subscription))
    return sum(offsets.values())


def committed(query: StreamingQuery) -> int:
    """The next offset of the query's last finished micro-batch (0 before the first)."""
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return 0
    end = progress["sources"][0]["endOffset"]
    offsets = json.loads(end) if isinstance(end, str) else end
    return sum(int(offset) for offset in offsets.get(TOPIC, {}).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--sample-ms", type=int, default=500)
    parser.add_argument(
        "--warm-up-records", type=int, default=50_000, help="produced and read before measuring"
    )
    parser.add_argument(
        "--min-partitions",
        type=int,
        default=2,
        help="the source's minPartitions: a micro-batch of the active segment alone is one "
        "split, one core, without it",
    )
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = parser.parse_args()
    run_in_scratch("pipeline-stream-bench-", args.dir, lambda scratch: run(args, scratch))


def run(args: argparse.Namespace, scratch: Path) -> None:
    print(machine_line())
    data_dir = scratch / "data"
    with sidecar(data_dir) as (address, _):
        with AdminClient(address) as admin:
            admin.create_topic(TOPIC)
        spark = spark_session()
        try:
            query = (
                spark.readStream.format("tierlog")
                .option("subscribe", TOPIC)
                .option("startingOffsets", "earliest")
                .option("minPartitions", str(args.min_partitions))
                .load(str(data_dir))
                .writeStream.format("noop")
                .option("checkpointLocation", str(scratch / "checkpoint"))
                .start()
            )
            try:
                measure(args, address, data_dir, query)
            finally:
                query.stop()
        finally:
            spark.stop()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def start_producer(args: argparse.Namespace, address: str, records: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            TIERLOG_BIN / "tierlog",
            *("perf", "produce", TOPIC, "--server", address),
            *("--num-records", str(records), "--record-size", str(args.record_size)),
            *("--throughput", "-1"),
            *("--producer-props", "acks=1", "--producer-props", f"batch.size={BATCH_BYTES}"),
            *("--producer-props", "linger.ms=1000"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_the_end(data_dir: Path, query: StreamingQuery) -> float:
    """Seconds until the query has committed the log's end as it is now."""
    started = time.perf_counter()
    end = log_end(data_dir)
    while committed(query) < end:
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        time.sleep(0.05)
    return time.perf_counter() - started


def measure(args: argparse.Namespace, address: str, data_dir: Path, query: StreamingQuery) -> None:
    if args.warm_up_records:  # a running stream's workers are started and its JVM warm
        start_producer(args, address, args.warm_up_records).communicate()
        warm_up_s = wait_for_the_end(data_dir, query)
        print(f"warm-up: {args.warm_up_records:,} records, read {warm_up_s:.1f} s after sent")
    warm_up_batches = len(query.recentProgress)
    producer = start_producer(args, address, args.records)
    lags: list[int] = []
    while producer.poll() is None:
        lags.append(max(0, log_end(data_dir) - committed(query)))
        time.sleep(args.sample_ms / 1000)
    output = producer.stdout.read() if producer.stdout else ""
    if producer.returncode != 0:
        raise RuntimeError(f"perf produce exited {producer.returncode}:\n{output[-2000:]}")
    produced = parse_produce(output)
    catch_up_s = wait_for_the_end(data_dir, query)
    rate = produced.records_per_s
    print(
        f"\n| producer ({args.record_size}-byte records, 1 MiB batches) | records/s "
        "| lag median (records, s at that rate) | lag max | samples | query at the log's end "
        "after the producer stopped |"
    )
    print("|---|---|---|---|---|---|")
    median, peak = statistics.median(lags or [0]), max(lags or [0])
    print(
        f"| {produced.records:,} records | {rate:,.0f} | {median:,.0f} ({median / rate:.2f} s) "
        f"| {peak:,} ({peak / rate:.2f} s) | {len(lags)} | {catch_up_s:.2f} s |"
    )
    print("lag samples: " + ", ".join(f"{lag:,}" for lag in lags))
    print("micro-batches (rows, ms: whole trigger / latestOffset / planning / addBatch):")
    for progress in query.recentProgress[warm_up_batches:]:
        durations = progress["durationMs"]
        print(
            f"  {progress['numInputRows']:,} rows, {durations.get('triggerExecution', 0)} / "
            f"{durations.get('latestOffset', 0)} / {durations.get('queryPlanning', 0)} / "
            f"{durations.get('addBatch', 0)}"
        )


if __name__ == "__main__":
    main()
