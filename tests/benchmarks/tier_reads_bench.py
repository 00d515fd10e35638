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
   front to back in 1 MiB fetches. Medians over ``--rounds``.
2. Time to first byte: ``--samples`` 1 MiB reads at offsets in distinct chunks, in random
   order, through one ``RemoteLogReader`` whose manifest view and offset index are already
   in memory but whose chunk cache holds none of those chunks (a fetch returns its bytes
   at once: its latency is its time to first byte), each followed by one boto3 ranged
   GET of 1 MiB at a random position of the same object. p50 of each.
3. Fan-out: ``--partitions`` partitions of one ``--fanout-mib`` segment each, consumed
   front to back through the broker's ``FetchReader.read_many`` (what Fetch and Subscribe
   call): fetches over every partition, 1 MiB per partition, ``fetch.max.bytes`` 50 MiB,
   cold (a new reader and cache each round), with partitions read in parallel
   (``partition_concurrency``, the default) and one after another (1), alternating.

With ``--latency-ms N`` every read (boto3's and the reader's alike) goes through a TCP
proxy that forwards each chunk N ms after it arrived (``tests.support.tcp_fault_proxy``),
as a store across a network answers: where a GET waits on the network rather than on
the CPU, what overlapping GETs is worth shows.

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
from tierlog.broker.fetch import FetchAnswer, PartitionFetch, next_offset
from tierlog.sidecar.remote_read_config import RemoteReadConfig
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
    parser.add_argument("--latency-ms", type=int, default=0, help="added to every read")
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
        proxy = None
        try:
            endpoint = minio.endpoint_url
            if args.latency_ms:
                proxy = TcpFaultProxy.start({"minio": f"127.0.0.1:{minio.port}"})
                proxy.delay("minio", args.latency_ms)
                endpoint = f"http://{proxy.address('minio')}"
            reads = S3Store(
                store.location, dataclasses.replace(store.options, endpoint_url=endpoint)
            )
            client = minio.client(endpoint)
            rows = measure(
                args, scratch, settings, client, reads,
                dataclasses.replace(stream, store=reads), dataclasses.replace(fanout, store=reads),
            )  # fmt: skip
            reads.close()
        finally:
            if proxy is not None:
                proxy.close()
            stream.close()
            fanout.close()
            store.close()
    finally:
        minio.stop()
    print("\n".join(rows))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def new_reader(topic: TieredTopic, cache_dir: Path, settings: RemoteReadConfig) -> RemoteLogReader:
    return topic.remote_reader(
        cache_dir,
        chunk_bytes=settings.chunk_bytes,
        prefetch_chunks=settings.prefetch_chunks,
        max_prefetch_chunks=settings.max_prefetch_chunks,
        threads=settings.reader_threads,
        read_ahead_memory_bytes=settings.prefetch_memory_bytes,
    )


def measure(
    args: argparse.Namespace,
    scratch: Path,
    settings: RemoteReadConfig,
    client: S3Client,
    store: S3Store,
    stream: TieredTopic,
    fanout: TieredTopic,
) -> list[str]:
    bucket = store.location.bucket
    tp = TopicPartition("stream", 0)
    probe = new_reader(stream, scratch / "probe", settings)
    (segment,) = probe.view(tp).all_segments()
    probe.ranges.close()
    key, size = store.location.root + segment.key, segment.object_size_bytes
    end = stream.tier_end[0]

    def boto3_whole() -> int:
        body: Any = client.get_object(Bucket=bucket, Key=key)["Body"]
        return len(body.read())

    def reader_whole() -> int:
        reader = new_reader(stream, scratch / "cache", settings)
        try:
            return read_through(lambda offset: reader.read(tp, offset, FETCH_BYTES), end)
        finally:
            reader.ranges.close()

    sequential = alternate(
        {"boto3 get_object, whole object": boto3_whole, "RemoteLogReader, cold": reader_whole},
        args.rounds,
    )

    def ranged_get(position: int) -> None:
        body: Any = client.get_object(
            Bucket=bucket, Key=key, Range=f"bytes={position}-{position + FETCH_BYTES - 1}"
        )["Body"]
        assert len(body.read()) == FETCH_BYTES

    ttfb = first_byte_ms(stream, tp, scratch, settings, end, size, args.samples, ranged_get)
    fan = fanout_rounds(fanout, scratch, settings, args.rounds)
    return report(sequential, ttfb, fan, args)


def alternate(contenders: dict[str, Callable[[], int]], rounds: int) -> dict[str, list[float]]:
    """Each contender's MiB/s per round, after one unmeasured warm-up round; the order
    reverses every round."""
    names = list(contenders)
    speeds: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(rounds + 1):
        for name in names if round_number % 2 else reversed(names):
            started = time.perf_counter()
            size = contenders[name]()
            seconds = time.perf_counter() - started
            if round_number:
                speeds[name].append(size / MiB / seconds)
        if round_number:
            print(f"round {round_number}: " + ", ".join(
                f"{name} {speeds[name][-1]:.0f} MiB/s" for name in names
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
    end_offset: int,
    object_size: int,
    samples: int,
    ranged_get: Callable[[int], None],
) -> dict[str, list[float]]:
    """Latencies of 1 MiB reads at offsets in distinct cold chunks (view and index warm),
    each followed by one ranged GET of 1 MiB."""
    reader = new_reader(topic, scratch / "cache-ttfb", settings)
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
    topic: TieredTopic, scratch: Path, settings: RemoteReadConfig, rounds: int
) -> dict[str, list[float]]:
    tps = [TopicPartition(topic.topic, p) for p in range(len(topic.tier_end))]

    def consume(concurrency: int) -> int:
        remote = new_reader(topic, scratch / "cache-fanout", settings)
        reader = topic.fetch_reader(remote, partition_concurrency=concurrency)
        offsets = dict.fromkeys(tps, 0)
        total = 0
        try:
            while offsets:
                fetches = [PartitionFetch(tp, at, FETCH_BYTES) for tp, at in offsets.items()]
                answers = reader.read_many(fetches, FETCH_MAX_BYTES, False)
                for fetch, answer in zip(fetches, answers, strict=True):
                    assert isinstance(answer, FetchAnswer), answer
                    total += len(answer.record_batches)
                    offsets[fetch.tp] = next_offset(answer.record_batches)
                    if offsets[fetch.tp] >= topic.tier_end[fetch.tp.partition]:
                        del offsets[fetch.tp]
        finally:
            reader.close()
            remote.ranges.close()
        return total

    return alternate(
        {
            f"partitions at once ({settings.reader_threads} threads)": partial(
                consume, settings.reader_threads
            ),
            "one after another": partial(consume, 1),
        },
        rounds,
    )


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(
    sequential: dict[str, list[float]],
    ttfb: dict[str, list[float]],
    fan: dict[str, list[float]],
    args: argparse.Namespace,
) -> list[str]:
    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"

    (reference, *_), rows = sequential.values(), []
    rows += [
        f"\nSequential cold read of a {args.segment_mib} MiB tiered segment, medians of "
        f"{args.rounds} rounds; latency added: {args.latency_ms} ms",
        "",
        "| reader | MiB/s median (min-max) | ratio to boto3 |",
        "|---|---|---|",
    ]
    for name, speeds in sequential.items():
        ratio = statistics.median(speeds) / statistics.median(reference)
        rows.append(f"| {name} | {cell(speeds)} | {ratio:.2f} |")
    (one_get, *_) = reversed(ttfb.values())
    rows += [
        f"\nTime to first byte, {len(one_get)} samples",
        "",
        "| read | p50 ms | p90 ms | ratio of p50s |",
        "|---|---|---|---|",
    ]
    for name, samples in ttfb.items():
        ratio = percentile(samples, 0.5) / percentile(one_get, 0.5)
        rows.append(
            f"| {name} | {percentile(samples, 0.5):.1f} | {percentile(samples, 0.9):.1f} "
            f"| {ratio:.2f} |"
        )
    (in_turn, *_) = reversed(fan.values())
    rows += [
        f"\nFan-out: {args.partitions} cold tiered partitions of {args.fanout_mib} MiB, "
        f"fetches of 1 MiB per partition, medians of {args.rounds} rounds",
        "",
        "| fetch | MiB/s median (min-max) | ratio to one after another |",
        "|---|---|---|",
    ]
    for name, speeds in fan.items():
        ratio = statistics.median(speeds) / statistics.median(in_turn)
        rows.append(f"| {name} | {cell(speeds)} | {ratio:.2f} |")
    return rows


if __name__ == "__main__":
    main()
