"""Pipeline benchmarks (issues 7 and 21): decoding segments into column batches, and Spark scans.

Run from the repository's root with ``.venv/bin/python -m tests.benchmarks.pipeline_bench``
(after ``make tools``, which installs MinIO). In one run:

1. records/s on one thread decoding 100-byte records (10-byte key, 90-byte value) from
   local segments into Spark column batches, uncompressed, lz4 and zstd (random values,
   which no codec shrinks, and lz4 and zstd again with JSON-like text values): plan, then the
   JVM reader over every split exactly as a Spark task reads it (every column of
   ``select *``), without Spark, in a JVM of its own (``tests/benchmarks/java/
   DecodeBench.java``, compiled here); beside it, in the same JVM and thread, the codec
   alone: the same batches' records sections decompressed by Kafka's codec classes into
   a reused buffer, nothing parsed; and the reading alone (the batches found in the
   segment files, as a task reads them). Thread CPU time, after warm-up runs;
2. a full scan of a ``--scan-mib`` topic (1 GiB by default) through
   ``spark.read.format("tierlog")`` on ``local[2]``: from local disk, and from an
   ``s3://`` tier in a MinIO on loopback holding the same segments (uploaded by the
   tier's uploader); and Spark reading the same records from Parquet (written from the
   same topic beforehand), with the same aggregate over the same columns: the ratio
   to beat;
3. with ``--kafka`` (the default; ``make tools`` installs the broker and Spark's Kafka
   source), Spark's own Kafka source (``spark-sql-kafka-0-10``) beside it on the same
   records: a topic of the same size written to a real Kafka broker on loopback by
   Kafka's ``ProducerPerformance`` (100-byte values, no keys), scanned through
   ``format("kafka")`` from the broker and through ``format("tierlog")`` from the
   broker's own log dir, same aggregate, same session, interleaved.

Decode figures are medians of ``--runs`` repetitions, scans of ``--scan-runs``. The
machine is shared: the load average is printed with the figures, and each scan's CPU
seconds (Spark's JVM and MinIO, from ``/proc``) beside its wall seconds, since the load
of others stretches wall seconds far more than CPU seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from tests.benchmarks.kafka_comparison_bench import PERF_TOOL_JVM_ARGS, run_client
from tests.benchmarks.scratch import machine_line, run_in_scratch
from tests.interop.kafka import KafkaBroker, KafkaTools, kafka_tools
from tests.pipeline.tiering import tier_closed_segments
from tests.support.minio import MinioServer
from tests.tools.bootstrap import SPARK_KAFKA, java_bin
from tierlog.pipeline import configure, register
from tierlog.pipeline.jars import classpath
from tierlog.pipeline.options import parse_options, parse_s3_options
from tierlog.pipeline.s3_connection import s3_connection
from tierlog.pipeline.source import plan_batch
from tierlog.pipeline.split_json import plan_json
from tierlog.pipeline.tiered import open_store
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import CompressionType, SimpleRecord, build_batch
from tierlog.storage.topic_partition import TopicPartition

MiB = 1024 * 1024
# 64 MiB segments: a 1 GiB topic has 16 of them to split, tier and scan in parallel.
BENCH_LOG_CONFIG = LogConfig.from_properties({"segment.bytes": str(64 * MiB)})
RECORDS_PER_BATCH = 500
TEMPLATES = 16
SCAN_AGGREGATE = (
    "count(*) AS records",
    "sum(length(key)) AS key_bytes",
    "sum(length(value)) AS value_bytes",
    "max(offset) AS last_offset",
    "max(timestamp) AS last_timestamp",
)


VALUE_BYTES = 90
# What the 90-byte values hold. Random bytes do not compress: lz4 stores them as
# literals and zstd as raw blocks, so "decompressing" them is a copy. Text is what a
# compressed topic usually carries (events as JSON); its codecs do real work.
RANDOM_VALUES = "random"
TEXT_VALUES = "text"


def value(kind: str, rng: random.Random) -> bytes:
    if kind == RANDOM_VALUES:
        return rng.randbytes(VALUE_BYTES)
    event = (
        f'{{"user":{rng.randrange(10**7)},"page":"/catalog/item/{rng.randrange(10**5)}",'
        f'"ms":{rng.randrange(10**4)},"ok":{rng.choice(["true", "false"])},'
        f'"ref":"campaign-{rng.randrange(1000)}"}}'
    )
    return event.encode().ljust(VALUE_BYTES)[:VALUE_BYTES]


def templates(codec: CompressionType, values: str = RANDOM_VALUES) -> list[bytes]:
    """Distinct batches of 100-byte records: a 10-byte key and a 90-byte value."""
    now = int(time.time() * 1000)
    rng = random.Random(now)
    return [
        build_batch(
            [
                SimpleRecord(b"key-%06d" % i, value(values, rng), now + i)
                for i in range(RECORDS_PER_BATCH)
            ],
            compression=codec,
        )
        for _ in range(TEMPLATES)
    ]


def write_topic(
    log_dir: Path,
    topic: str,
    codec: CompressionType,
    total_bytes: int,
    values: str = RANDOM_VALUES,
) -> int:
    """One partition of about ``total_bytes`` of log; returns its record count."""
    log = Log.open(log_dir / f"{topic}-0", BENCH_LOG_CONFIG)
    batches = templates(codec, values)
    written = 0
    records = 0
    while written < total_bytes:
        batch = batches[records // RECORDS_PER_BATCH % TEMPLATES]
        log.append(batch)
        written += len(batch)
        records += RECORDS_PER_BATCH
    log.close()
    return records


DECODE_BENCH = Path(__file__).resolve().parent / "java" / "DecodeBench.java"
# Spark's own module options for Java 17 (its column vectors use sun.misc.Unsafe and nio).
SPARK_JAVA_OPTIONS = (
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
)


def decode_classpath(classes: Path) -> str:
    """The reader's jars, PySpark's and DecodeBench compiled into ``classes``."""
    import pyspark

    spark_jars = Path(pyspark.__file__).parent / "jars" / "*"
    path = os.pathsep.join([str(spark_jars), *map(str, classpath())])
    classes.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(java_bin("javac")), "-nowarn", "-d", str(classes), "-cp", path, str(DECODE_BENCH)],
        check=True,
    )
    return f"{classes}{os.pathsep}{path}"


@dataclass(frozen=True)
class DecodeFigures:
    """Medians of DecodeBench's runs over one topic: thread CPU and wall seconds."""

    records: int
    decode_cpu_s: float
    decode_wall_s: float
    codec_cpu_s: float  # 0 for an uncompressed topic: no codec to run
    read_cpu_s: float  # the batches found in the segment files, nothing decompressed


def decode_figures(
    java_classpath: str, scratch: Path, log_dir: Path, topic: str, runs: int
) -> DecodeFigures:
    """Every split of the topic (planned here) decoded, and its codec alone, by DecodeBench."""
    options = parse_options({"path": str(log_dir), "subscribe": topic})
    plan = scratch / f"{topic}-plan.json"
    plan.write_text(
        json.dumps(plan_json(plan_batch(options), options.max_records_per_batch, s3_connection))
    )
    done = subprocess.run(
        [
            str(java_bin("java")),
            *("-Xms1g", "-Xmx1g", *SPARK_JAVA_OPTIONS),
            *("-cp", java_classpath, "tierlog.spark.read.DecodeBench", str(plan), str(runs)),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    decode = answer["decode"]
    codec = answer["codec"] if answer["compressed_batches"] else [[0, 0]]
    return DecodeFigures(
        records=answer["records"],
        decode_cpu_s=statistics.median(run[0] for run in decode),
        decode_wall_s=statistics.median(run[1] for run in decode),
        codec_cpu_s=statistics.median(run[0] for run in codec),
        read_cpu_s=statistics.median(run[0] for run in answer["read"]),
    )


def spark_session(*, kafka_source: bool = False) -> SparkSession:
    """``local[2]``, with Spark's Kafka source's jars when ``kafka_source``."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("tierlog-pipeline-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.python.authenticate.socketTimeout", "180s")
    )
    if kafka_source:
        if not SPARK_KAFKA.is_current():
            sys.exit(f"{SPARK_KAFKA.name} is not installed: run `make tools` first")
        jars = sorted(str(jar) for jar in (SPARK_KAFKA.home / "libs").glob("*.jar"))
        builder = builder.config("spark.jars", ",".join(jars))
    spark = configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def scan_cost(frame: DataFrame, pids: list[int]) -> tuple[float, list[float]]:
    """One full scan, the same aggregate over the same columns whatever the source: its
    wall seconds and the CPU seconds each process of ``pids`` spent meanwhile."""
    started, started_cpu = time.perf_counter(), [cpu_seconds(pid) for pid in pids]
    frame.selectExpr(*SCAN_AGGREGATE).collect()
    wall = time.perf_counter() - started
    return wall, [cpu_seconds(pid) - before for pid, before in zip(pids, started_cpu, strict=True)]


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a live process so far (Linux's ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--decode-mib", type=int, default=64)
    parser.add_argument("--scan-mib", type=int, default=1024, help="0: decode figures only")
    parser.add_argument("--scan-runs", type=int, default=1, help="full scans are minutes each")
    parser.add_argument(
        "--kafka",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also scan the same records with Spark's Kafka source from a Kafka broker",
    )
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = parser.parse_args()
    run_in_scratch("pipeline-bench-", args.dir, lambda scratch: run(args, scratch))


def run(args: argparse.Namespace, scratch: Path) -> None:
    print(machine_line())
    decode_table(args, scratch)
    if not args.scan_mib:
        return
    spark = spark_session(kafka_source=args.kafka)
    try:
        scan_table(args, scratch, spark)
    finally:
        spark.stop()


DECODE_CASES = [
    (CompressionType.NONE, RANDOM_VALUES),
    (CompressionType.LZ4, RANDOM_VALUES),
    (CompressionType.ZSTD, RANDOM_VALUES),
    (CompressionType.LZ4, TEXT_VALUES),
    (CompressionType.ZSTD, TEXT_VALUES),
]


def decode_table(args: argparse.Namespace, scratch: Path) -> None:
    java_classpath = decode_classpath(scratch / "decode-classes")
    print(
        "\n| decode 100-byte records to column batches (select *), one JVM thread "
        "| records per CPU second | records per wall second | MB of records per CPU second "
        "| reading the batches alone, records per CPU second "
        "| codec alone, records per CPU second | decode / codec CPU time |"
    )
    print("|---|---|---|---|---|---|---|")
    for codec, values in DECODE_CASES:
        log_dir = scratch / f"decode-{codec.name.lower()}-{values}"
        records = write_topic(log_dir, "bench", codec, args.decode_mib * MiB, values)
        figures = decode_figures(java_classpath, scratch, log_dir, "bench", args.runs)
        assert figures.records == records, (figures.records, records)
        cpu_rate = records / figures.decode_cpu_s
        codec_only = "-", "-"
        if figures.codec_cpu_s:
            codec_rate = records / figures.codec_cpu_s
            codec_only = f"{codec_rate:,.0f}", f"{figures.decode_cpu_s / figures.codec_cpu_s:.2f}"
        print(
            f"| {codec.name.lower()}, {values} values ({records:,} records) | {cpu_rate:,.0f} | "
            f"{records / figures.decode_wall_s:,.0f} | {cpu_rate * 100 / 1e6:.1f} | "
            f"{records / figures.read_cpu_s:,.0f} | {codec_only[0]} | {codec_only[1]} |"
        )


def scan_table(args: argparse.Namespace, scratch: Path, spark: SparkSession) -> None:
    log_dir = scratch / "scan"
    records = write_topic(log_dir, "scan", CompressionType.NONE, args.scan_mib * MiB)
    minio = MinioServer(scratch / "minio").start()
    try:
        tier_url, s3_options = tier_to_minio(minio, log_dir / "scan-0", scratch / "secret")
        with contextlib.ExitStack() as stack:
            broker = None
            if args.kafka:
                tools = kafka_tools()
                broker = stack.enter_context(KafkaBroker(tools, scratch / "kafka"))
                produce_to_kafka(tools, broker, KAFKA_TOPIC, records)
            assert minio.process is not None
            seconds, cpu, counts = scan_all(
                spark, args, scratch, log_dir, records, tier_url, s3_options, broker,
                [spark.sparkContext._gateway.proc.pid, minio.process.pid],  # type: ignore[union-attr]
            )  # fmt: skip
    finally:
        minio.stop()
    parquet_rate = counts[PARQUET] / statistics.median(seconds[PARQUET])
    print(
        f"\n| full scan, {args.scan_mib} MiB topic ({records:,} records), local[2] "
        "| records | seconds | records/s | vs Parquet | CPU seconds (Spark's JVM + MinIO) |"
    )
    print("|---|---|---|---|---|---|")
    for name, runs in seconds.items():
        median = statistics.median(runs)
        rate = counts[name] / median
        print(
            f"| {name} | {counts[name]:,} | {median:.1f} | {rate:,.0f} | "
            f"{rate / parquet_rate:.2f} | "
            + " + ".join(f"{statistics.median(each):.2f}" for each in zip(*cpu[name], strict=True))
            + " |"
        )
    if KAFKA_SOURCE in seconds:
        kafka_rate = counts[KAFKA_SOURCE] / statistics.median(seconds[KAFKA_SOURCE])
        tierlog_rate = counts[TIERLOG_ON_KAFKA] / statistics.median(seconds[TIERLOG_ON_KAFKA])
        print(
            f"\ntierlog / Spark's Kafka source on the same topic: {tierlog_rate / kafka_rate:.2f}"
        )
    for name, runs in seconds.items():
        cpu_runs = ", ".join(" + ".join(f"{each:.2f}" for each in run) for run in cpu[name])
        print(f"{name}: " + ", ".join(f"{run:.2f}" for run in runs) + f" s, CPU {cpu_runs} s")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


PARQUET = "Parquet of the same records"
KAFKA_TOPIC = "kafka-scan"
KAFKA_SOURCE = "Spark's Kafka source, from the Kafka broker"
TIERLOG_ON_KAFKA = "tierlog segments, the Kafka broker's log dir"


def produce_to_kafka(tools: KafkaTools, broker: KafkaBroker, topic: str, records: int) -> None:
    """``records`` 100-byte records (no key) in one partition of ``broker`` by Kafka's
    own producer, in 64 MiB segments as tierlog's topic has."""
    broker.create_topic(topic, {"segment.bytes": str(64 * MiB)})
    run_client(
        tools.command(
            "org.apache.kafka.tools.ProducerPerformance",
            *("--topic", topic, "--num-records", str(records), "--record-size", "100"),
            *("--throughput", "-1", "--producer-props"),
            f"bootstrap.servers={broker.bootstrap_server}",
            *("acks=1", "batch.size=65536", "linger.ms=100"),
            jvm_args=PERF_TOOL_JVM_ARGS,
        ),
        timeout_s=1800,
    )


def scan_all(
    spark: SparkSession,
    args: argparse.Namespace,
    scratch: Path,
    log_dir: Path,
    records: int,
    tier_url: str,
    s3_options: dict[str, str],
    broker: KafkaBroker | None,
    pids: list[int],
) -> tuple[dict[str, list[float]], dict[str, list[list[float]]], dict[str, int]]:
    """Wall and CPU seconds (of the processes ``pids``) of each full scan (interleaved
    runs), and the records each one reads."""
    reader = spark.read.format("tierlog").option("subscribe", "scan")
    local = reader.option("minPartitions", "8").load(str(log_dir))
    tiered = reader.option("minPartitions", "8").options(**s3_options).load(tier_url)
    parquet = scratch / "scan.parquet"
    local.write.parquet(str(parquet))
    scans = {
        "tierlog segments, local disk": local,
        "tierlog segments, MinIO tier (closed segments)": tiered,
        PARQUET: spark.read.parquet(str(parquet)),
    }
    counts = dict.fromkeys(scans, records)  # the tier lacks the active segment:
    counts["tierlog segments, MinIO tier (closed segments)"] = tiered.count()
    assert scans[PARQUET].count() == records
    if broker is not None:
        scans[KAFKA_SOURCE] = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap_server)
            .option("subscribe", KAFKA_TOPIC)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .option("minPartitions", "8")
            .load()
        )
        scans[TIERLOG_ON_KAFKA] = (
            spark.read.format("tierlog")
            .option("subscribe", KAFKA_TOPIC)
            .option("minPartitions", "8")
            .load(str(broker.log_dir))
        )
        counts[KAFKA_SOURCE] = counts[TIERLOG_ON_KAFKA] = records
        assert scans[KAFKA_SOURCE].count() == scans[TIERLOG_ON_KAFKA].count() == records
    seconds: dict[str, list[float]] = {name: [] for name in scans}
    cpu: dict[str, list[list[float]]] = {name: [] for name in scans}
    for _ in range(args.scan_runs):  # interleaved: all see the same machine
        for name, frame in scans.items():
            wall, cpu_seconds_each = scan_cost(frame, pids)
            seconds[name].append(wall)
            cpu[name].append(cpu_seconds_each)
    return seconds, cpu, counts


def tier_to_minio(
    minio: MinioServer, partition_dir: Path, secret: Path
) -> tuple[str, dict[str, str]]:
    """Upload the partition's closed segments to a fresh bucket with the tier's uploader;
    returns the tier URL and the data source options that reach it."""
    secret.mkdir()
    (secret / "access_key_id").write_text(minio.access_key_id)
    (secret / "secret_access_key").write_text(minio.secret_access_key)
    options = {
        "s3.endpoint.url": minio.endpoint_url,
        "s3.region": minio.region,
        "s3.path.style.access.enabled": "true",
        "s3.credentials.path": str(secret),
    }
    url = f"s3://{minio.create_bucket('bench')}/tier"
    store = open_store(url, parse_s3_options(options))
    log = Log.open(partition_dir, BENCH_LOG_CONFIG)
    try:
        tier_closed_segments(store, TopicPartition("scan", 0), log)
    finally:
        log.close()
        store.close()
    return url, options


if __name__ == "__main__":
    main()
