"""Reads of the tier beside the store's own speed (issue 33), in one run against one MinIO.

Run from the repository's root (after ``make tools``, which installs MinIO)::

    .venv/bin/python -m tests.benchmarks.tier_reads_bench --segment-mib 64 --rounds 5

One MinIO on loopback, one ``S3Store`` at its default ``S3Options``, the sidecar's default
remote-read settings (``RemoteReadConfig``: chunk size, prefetch, threads). Two tiered
topics are written through a real ``LogManager`` (``tests.broker.tiered_topic``), their
closed segments uploaded and deleted locally:

1. Sequential: one partition holding one ``--segment-mib`` segment of 1 KiB random
   records. Each round, in an order alternating from round to round: boto3's
   ``get_object`` of the segment's whole object, body read into memory (the store's
   own GET throughput, one stream), and a cold ``RemoteLogReader`` (a new, empty chunk
   cache: its manifest view, its index and every chunk from MinIO) reading the segment
   front to back in 1 MiB fetches; and the same cold reader given the partition's
   manifest as the writer of its process stores it (``RemoteLogReader.offer``: the
   sidecar leading the partition, whose view is in memory, its chunks and index not),
   so its first data GET goes out without the manifest's listing and GET before it.
   Medians over ``--rounds``. The readers of a run share
   the buffers their GETs read into (``ChunkBuffers``), as the sidecar's one reader
   keeps its own over the process's life: the data is cold, the process is not.
2. Time to first byte: ``--samples`` 1 MiB reads at offsets in distinct chunks, in random
   order, through one ``RemoteLogReader`` whose manifest view and offset index are already
   in memory but whose chunk cache holds none of those chunks (a fetch returns its bytes
   at once: its latency is its time to first byte), each followed by one boto3 ranged
   GET of 1 MiB at a random position of the same object. p50 of each.
3. Fan-out: ``--partitions`` partitions of one ``--fanout-mib`` segment each, consumed
   front to back through the broker's ``FetchReader.read_many`` (what Fetch and Subscribe
   call), 1 MiB per partition, ``fetch.max.bytes`` 50 MiB, cold (a new reader and cache
   each round), alternating between: every partition at once (fetches over all of them,
   read in parallel: ``partition_concurrency``, the default), and one after another
   (fetches of partition 1 alone until its end, then of partition 2, ...: the same
   reader, read-ahead and all, but a partition's GETs run only while it is the one read,
   as a consumer reading the partitions in turn would see them).
4. A first fetch: one ``read_many`` over the same ``--partitions`` partitions, 1 MiB of
   each from their first offset, through a cold reader (a new reader and cache each
   round), its partitions read at once against one after another
   (``partition_concurrency`` 1, as a broker that serves one tiered partition at a time
   would). Only the fetch is timed, not the reader's start or its close. This is the
   issue's "a fetch over 8 cold tiered partitions": every partition's manifest, index
   and first chunk come from the store, and nothing is read ahead of it yet; in the
   fan-out above only the first of a partition's many fetches is cold.

Each condition of ``--latency-ms`` (default ``0,20``) runs all four against the same
MinIO and topics, reported side by side. 0 is loopback: no first-byte latency at all,
so a GET costs CPU and nothing else, and MinIO shares the machine's cores with the
reader. N > 0 sends every read (boto3's and the reader's alike) through a TCP proxy
(``tests.support.tcp_fault_proxy``, its own process) that forwards each piece of bytes
N/2 ms after it arrived, both ways: each request's first byte comes N ms later, while
a body streams at the pace it left MinIO (the delay shifts it, it does not throttle
it). 20 ms is a typical S3 first-byte figure: AWS's S3 performance guide names "median
latencies ... often in the tens of milliseconds range" for small GETs
(https://docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-best-practices/timeouts-and-retries-for-latency-sensitive-applications.html).
The proxy's own CPU (Python, 64 KiB pieces) is spent on the same two cores: both sides
pay it alike.

The machine is shared: the load average at the start and the end is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.benchmarks.scratch import machine_line, run_in_scratch
from tests.benchmarks.tier_bench import s3_store
from tests.broker.tiered_topic import TieredTopic, fill_random
from tests.support.minio import MinioServer
from tests.support.tcp_fault_proxy import TcpFaultProxy
from tierlog.broker.fetch import FetchAnswer, FetchReader, PartitionFetch, next_offset
from tierlog.sidecar.remote_read_config import RemoteReadConfig
from tierlog.storage.tier.chunk_buffers import ChunkBuffers
from tierlog.storage.tier.manifest_store import load_manifest
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.tier.s3_store import S3Store
from tierlog.storage.topic_partition import TopicPartition

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MiB = 1 << 20
FETCH_BYTES = MiB
FETCH_MAX_BYTES = 50 * MiB  # Kafka's fetch.max.bytes default


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--fanout-mib", type=int, default=16)
    parser.add_argument(
        "--latency-ms", default="0,20", help="first-byte latencies added, one run each"
    )
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = parser.parse_args()
    run_in_scratch("tier-reads-bench-", args.dir, lambda scratch: run(args, scratch))


def run(args: argparse.Namespace, scratch: Path) -> None:
    print(machine_line(), flush=True)
    settings = RemoteReadConfig.from_properties({}, [scratch])
    minio = MinioServer(scratch / "minio").start()
    try:
        store = s3_store(minio, scratch)
        segment_bytes = {"segment.bytes": str(1 << 30)}
        stream = TieredTopic.open(
            scratch / "stream", store, "stream", 1,
            lambda log, _p: fill_random(log, args.segment_mib * MiB, seed=1), segment_bytes,
        )  # fmt: skip
        fanout = TieredTopic.open(
            scratch / "fanout", store, "fanout", args.partitions,
            lambda log, p: fill_random(log, args.fanout_mib * MiB, seed=10 + p), segment_bytes,
        )  # fmt: skip
        proxy = TcpFaultProxy.start({"minio": f"127.0.0.1:{minio.port}"})
        figures: dict[int, dict[str, float]] = {}
        try:
            for latency_ms in (int(ms) for ms in args.latency_ms.split(",")):
                print(f"\n-- first-byte latency added: {latency_ms} ms", flush=True)
                proxy.delay("minio", latency_ms // 2)
                endpoint = minio.endpoint_url
                if latency_ms:
                    endpoint = f"http://{proxy.address('minio')}"
                reads = S3Store(
                    store.location, dataclasses.replace(store.options, endpoint_url=endpoint)
                )
                client = minio.client(endpoint)
                figures[latency_ms] = measure(
                    args, scratch, settings, client, reads,
                    dataclasses.replace(stream, store=reads),
                    dataclasses.replace(fanout, store=reads),
                )  # fmt: skip
                reads.close()
        finally:
            proxy.close()
            stream.close()
            fanout.close()
            store.close()
    finally:
        minio.stop()
    print("\n".join(report(figures, args)))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def new_reader(
    topic: TieredTopic,
    cache_dir: Path,
    settings: RemoteReadConfig,
    buffers: ChunkBuffers | None = None,
) -> RemoteLogReader:
    """A cold reader: an empty chunk cache, no manifest view or index in memory. With
    ``buffers`` (an earlier reader's) it stands for the sidecar's one long-lived reader,
    whose GETs read into the buffers its earlier reads made, not into fresh memory."""
    return topic.remote_reader(
        cache_dir,
        chunk_bytes=settings.chunk_bytes,
        prefetch_chunks=settings.prefetch_chunks,
        max_prefetch_chunks=settings.max_prefetch_chunks,
        threads=settings.reader_threads,
        read_ahead_memory_bytes=settings.prefetch_memory_bytes,
        buffers=buffers,
    )


def measure(
    args: argparse.Namespace,
    scratch: Path,
    settings: RemoteReadConfig,
    client: S3Client,
    store: S3Store,
    stream: TieredTopic,
    fanout: TieredTopic,
) -> dict[str, float]:
    bucket = store.location.bucket
    tp = TopicPartition("stream", 0)
    probe = new_reader(stream, scratch / "probe", settings)
    (segment,) = probe.view(tp).all_segments()
    probe.ranges.close()
    buffers = probe.ranges.buffers
    key, size = store.location.root + segment.key, segment.object_size_bytes
    end = stream.tier_end[0]

    def boto3_whole() -> int:
        body: Any = client.get_object(Bucket=bucket, Key=key)["Body"]
        return len(body.read())

    def reader_whole() -> int:
        reader = new_reader(stream, scratch / "cache", settings, buffers)
        try:
            return read_through(lambda offset: reader.read(tp, offset, FETCH_BYTES), end)
        finally:
            reader.ranges.close()

    manifest = load_manifest(store, tp)

    def reader_whole_offered() -> int:
        reader = new_reader(stream, scratch / "cache", settings, buffers)
        reader.offer(manifest)
        try:
            return read_through(lambda offset: reader.read(tp, offset, FETCH_BYTES), end)
        finally:
            reader.ranges.close()

    sequential = alternate(
        {
            "boto3 get_object, whole object": boto3_whole,
            "RemoteLogReader, cold": reader_whole,
            "RemoteLogReader, cold, view offered": reader_whole_offered,
        },
        args.rounds,
    )

    def ranged_get(position: int) -> None:
        body: Any = client.get_object(
            Bucket=bucket, Key=key, Range=f"bytes={position}-{position + FETCH_BYTES - 1}"
        )["Body"]
        assert len(body.read()) == FETCH_BYTES

    ttfb = first_byte_ms(
        stream, tp, scratch, settings, buffers, end, size, args.samples, ranged_get
    )
    fan = fanout_rounds(fanout, scratch, settings, buffers, args.rounds)
    (boto3, boto3_cpu, reader, reader_cpu, offered, offered_cpu) = sequential.values()
    (parallel, parallel_cpu, in_turn, in_turn_cpu, first_parallel, _, first_in_turn, _) = (
        fan.values()
    )
    (reader_ms, get_ms) = ttfb.values()
    return {
        "boto3": statistics.median(boto3),
        "boto3 cpu": statistics.median(boto3_cpu),
        "reader cpu": statistics.median(reader_cpu),
        "parallel cpu": statistics.median(parallel_cpu),
        "in turn cpu": statistics.median(in_turn_cpu),
        "reader": statistics.median(reader),
        "reader min": min(reader),
        "reader max": max(reader),
        "offered": statistics.median(offered),
        "offered min": min(offered),
        "offered max": max(offered),
        "offered cpu": statistics.median(offered_cpu),
        "reader ttfb p50": percentile(reader_ms, 0.5),
        "reader ttfb p90": percentile(reader_ms, 0.9),
        "get ttfb p50": percentile(get_ms, 0.5),
        "get ttfb p90": percentile(get_ms, 0.9),
        "parallel": statistics.median(parallel),
        "parallel min": min(parallel),
        "parallel max": max(parallel),
        "in turn": statistics.median(in_turn),
        "in turn min": min(in_turn),
        "in turn max": max(in_turn),
        "first parallel": statistics.median(first_parallel),
        "first parallel min": min(first_parallel),
        "first parallel max": max(first_parallel),
        "first in turn": statistics.median(first_in_turn),
        "first in turn min": min(first_in_turn),
        "first in turn max": max(first_in_turn),
    }


@dataclasses.dataclass(frozen=True)
class Timed:
    """What a contender read, and how long the part of its call worth timing took."""

    size: int
    seconds: float


def alternate(
    contenders: dict[str, Callable[[], int | Timed]], rounds: int
) -> dict[str, list[float]]:
    """Each contender's MiB/s per round, after one unmeasured warm-up round; the order
    reverses every round. A contender returns the bytes it read (its whole call timed) or
    a ``Timed``. Also, under ``"<name> cpu"``, the CPU this process spent per MiB over
    the whole call (all its threads; MinIO's not), steadier than MiB/s on a shared
    machine."""
    names = list(contenders)
    speeds: dict[str, list[float]] = {key: [] for name in names for key in (name, f"{name} cpu")}
    for round_number in range(rounds + 1):
        for name in names if round_number % 2 else reversed(names):
            started, cpu_started = time.perf_counter(), time.process_time()
            read = contenders[name]()
            seconds = time.perf_counter() - started
            if isinstance(read, Timed):
                size, seconds = read.size, read.seconds
            else:
                size = read
            if round_number:
                speeds[name].append(size / MiB / seconds)
                speeds[f"{name} cpu"].append((time.process_time() - cpu_started) * 1e3 * MiB / size)
        if round_number:
            print(f"round {round_number}: " + ", ".join(
                f"{name} {speeds[name][-1]:.0f} MiB/s ({speeds[f'{name} cpu'][-1]:.2f} CPU ms/MiB)"
                for name in names
            ), flush=True)  # fmt: skip
    return speeds


def read_through(read: Callable[[int], bytes], end_offset: int) -> int:
    """Record bytes read front to back up to ``end_offset``."""
    offset, total = 0, 0
    while offset < end_offset:
        records = read(offset)
        total += len(records)
        offset = next_offset(records)
    return total


def first_byte_ms(
    topic: TieredTopic,
    tp: TopicPartition,
    scratch: Path,
    settings: RemoteReadConfig,
    buffers: ChunkBuffers,
    end_offset: int,
    object_size: int,
    samples: int,
    ranged_get: Callable[[int], None],
) -> dict[str, list[float]]:
    """Latencies of 1 MiB reads at offsets in distinct cold chunks (view and index warm),
    each followed by one ranged GET of 1 MiB."""
    reader = new_reader(topic, scratch / "cache-ttfb", settings, buffers)
    rng = random.Random(2)
    log_bytes = settings.chunk_bytes * 8  # the first chunks serve the warm-up read
    chunks = object_size // settings.chunk_bytes
    picks = rng.sample(range(12, chunks - 2), min(samples, chunks - 14))
    offsets = [int(end_offset * pick * settings.chunk_bytes / object_size) for pick in picks]
    latencies: dict[str, list[float]] = {"RemoteLogReader, cold chunk": [], "one ranged GET": []}
    try:
        reader.read(tp, 0, log_bytes)  # the view and the offset index into memory
        for offset in offsets:
            started = time.perf_counter()
            assert reader.read(tp, offset, FETCH_BYTES)
            latencies["RemoteLogReader, cold chunk"].append((time.perf_counter() - started) * 1e3)
            position = rng.randrange(0, object_size - FETCH_BYTES)
            started = time.perf_counter()
            ranged_get(position)
            latencies["one ranged GET"].append((time.perf_counter() - started) * 1e3)
    finally:
        reader.ranges.close()
    return latencies


def fanout_rounds(
    topic: TieredTopic,
    scratch: Path,
    settings: RemoteReadConfig,
    buffers: ChunkBuffers,
    rounds: int,
) -> dict[str, list[float]]:
    """Section 3 of the module's docstring, then section 4."""
    tps = [TopicPartition(topic.topic, p) for p in range(len(topic.tier_end))]

    def cold(read: Callable[[FetchReader], int | Timed], concurrency: int) -> int | Timed:
        remote = new_reader(topic, scratch / "cache-fanout", settings, buffers)
        reader = topic.fetch_reader(remote, partition_concurrency=concurrency)
        try:
            return read(reader)
        finally:
            reader.close()
            remote.ranges.close()

    def consume(groups: list[list[TopicPartition]], reader: FetchReader) -> int:
        """Each group of partitions read to its end by fetches over the whole group,
        one group after another."""
        return sum(consume_together(topic, reader, group) for group in groups)

    def first_fetch(reader: FetchReader) -> Timed:
        fetches = [PartitionFetch(tp, 0, FETCH_BYTES) for tp in tps]
        started = time.perf_counter()
        answers = reader.read_many(fetches, FETCH_MAX_BYTES, False)
        seconds = time.perf_counter() - started
        assert all(isinstance(a, FetchAnswer) and a.record_batches for a in answers), answers
        return Timed(
            sum(len(a.record_batches) for a in answers if isinstance(a, FetchAnswer)), seconds
        )

    threads = settings.reader_threads
    consumed = alternate(
        {
            f"partitions at once ({threads} threads)": partial(
                cold, partial(consume, [tps]), threads
            ),
            "one after another": partial(cold, partial(consume, [[tp] for tp in tps]), threads),
        },
        rounds,
    )
    first = alternate(
        {
            f"a first fetch, partitions at once ({threads} threads)": partial(
                cold, first_fetch, threads
            ),
            "a first fetch, one after another": partial(cold, first_fetch, 1),
        },
        rounds,
    )
    return consumed | first


def consume_together(topic: TieredTopic, reader: FetchReader, tps: list[TopicPartition]) -> int:
    """Record bytes of ``tps`` read front to back, each fetch over all those not done."""
    offsets = dict.fromkeys(tps, 0)
    total = 0
    while offsets:
        fetches = [PartitionFetch(tp, at, FETCH_BYTES) for tp, at in offsets.items()]
        answers = reader.read_many(fetches, FETCH_MAX_BYTES, False)
        for fetch, answer in zip(fetches, answers, strict=True):
            assert isinstance(answer, FetchAnswer), answer
            total += len(answer.record_batches)
            offsets[fetch.tp] = next_offset(answer.record_batches)
            if offsets[fetch.tp] >= topic.tier_end[fetch.tp.partition]:
                del offsets[fetch.tp]
    return total


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(figures: dict[int, dict[str, float]], args: argparse.Namespace) -> list[str]:
    """One table, a column per condition: medians over ``--rounds`` (min-max), p50/p90
    over ``--samples``, and the ratios the issue sets targets for."""
    conditions = list(figures)
    names = ["loopback" if ms == 0 else f"+{ms} ms first byte" for ms in conditions]
    rows = [
        f"\n{args.segment_mib} MiB segment, {args.rounds} rounds, {args.samples} TTFB samples, "
        f"fan-out over {args.partitions} partitions of {args.fanout_mib} MiB",
        "",
        "| figure | " + " | ".join(names) + " | target |",
        "|---|" + "---|" * len(names) + "---|",
    ]

    def row(label: str, cell: Callable[[dict[str, float]], str], target: str = "") -> None:
        cells = " | ".join(cell(figures[ms]) for ms in conditions)
        rows.append(f"| {label} | {cells} | {target} |")

    def spread(name: str) -> Callable[[dict[str, float]], str]:
        return lambda f: f"{f[name]:.0f} ({f[name + ' min']:.0f}-{f[name + ' max']:.0f})"

    row("boto3 `get_object`, whole object, MiB/s", lambda f: f"{f['boto3']:.0f}")
    row("`RemoteLogReader` cold, MiB/s", spread("reader"))
    row("cold read / boto3", lambda f: f"{f['reader'] / f['boto3']:.2f}", ">= 0.8")
    row("CPU ms per MiB in this process, boto3 / reader",
        lambda f: f"{f['boto3 cpu']:.2f} / {f['reader cpu']:.2f}")  # fmt: skip
    row("`RemoteLogReader` cold, view offered by its writer, MiB/s", spread("offered"))
    row("cold read, view offered / boto3", lambda f: f"{f['offered'] / f['boto3']:.2f}")
    row("TTFB p50 (p90), one ranged GET, ms",
        lambda f: f"{f['get ttfb p50']:.1f} ({f['get ttfb p90']:.1f})")  # fmt: skip
    row("TTFB p50 (p90), `RemoteLogReader` cold chunk, ms",
        lambda f: f"{f['reader ttfb p50']:.1f} ({f['reader ttfb p90']:.1f})")  # fmt: skip
    row("TTFB p50 reader / GET", lambda f: f"{f['reader ttfb p50'] / f['get ttfb p50']:.2f}",
        "<= 1.2")  # fmt: skip
    row("fan-out, partitions at once, MiB/s", spread("parallel"))
    row("fan-out, one after another, MiB/s", spread("in turn"))
    row("fan-out at once / in turn", lambda f: f"{f['parallel'] / f['in turn']:.2f}")
    row("fan-out CPU ms per MiB, at once / in turn",
        lambda f: f"{f['parallel cpu']:.2f} / {f['in turn cpu']:.2f}")  # fmt: skip
    row("a first fetch over the cold partitions, at once, MiB/s", spread("first parallel"))
    row("a first fetch over the cold partitions, one after another, MiB/s",
        spread("first in turn"))  # fmt: skip
    row("a first fetch, at once / one after another",
        lambda f: f"{f['first parallel'] / f['first in turn']:.2f}", ">= 4")  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
