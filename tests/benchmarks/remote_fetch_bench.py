"""Remote fetch from the tier beside local fetch of the same data (issue 5).

Run with::

    .venv/bin/python -m tests.benchmarks.remote_fetch_bench --mib 128 --runs 5

One log of ``--mib`` MiB (1 KiB records in 64 KiB batches, 16 MiB segments) is written
once; its closed segments are tiered to a MinIO on loopback (the one the tests build,
``make tools``; ``--store local`` tiers to a local directory instead). Then, in each
run, side by side on the same offsets:

- throughput: the whole log read front to back in 1 MiB fetches (``max_bytes``)
  locally (``Log.read``, page cache warm), from the tier cold (an empty chunk cache:
  every chunk a ranged GET, prefetch on) and warm (the same reader again: every chunk
  from the disk cache);
- time to first byte: one 1 MiB fetch at each of ``--samples`` random offsets (the
  fetch returns all its bytes at once, so this is its latency), locally, from the
  tier cold (a fresh, empty cache per offset set; offsets in distinct chunks) and warm.

The reads are the storage layer's (``RemoteLogReader``, ``Log.read``), without gRPC:
what the tier adds to a fetch. Figures are medians over the runs; p50/p99 within a
run, then the median of each over runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.storage.tier.uploads import tier_closed_segments
from tierlog.storage.checkpoints import TopicPartition
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import SimpleRecord, build_batch, iter_batches
from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.range_reader import RangeReader
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.tier.store import ObjectStore

MiB = 1 << 20
FETCH_BYTES = MiB
TP = TopicPartition("bench", 0)


def write_log(directory: Path, size_mib: int) -> Log:
    config = LogConfig.from_properties(
        {"segment.bytes": str(16 * MiB), "remote.storage.enable": "true"}
    )
    log = Log.open(directory, config)
    rng = random.Random(1)
    timestamp = 1_700_000_000_000
    while log.size_bytes < size_mib * MiB:
        records = [SimpleRecord(b"k%d" % i, rng.randbytes(1024), timestamp + i) for i in range(64)]
        log.append(build_batch(records))
        timestamp += 64
    log.roll()
    return log


@contextmanager
def tier_store(kind: str, root: Path) -> Iterator[ObjectStore]:
    if kind == "local":
        from tierlog.storage.tier.local_store import LocalDirectoryStore

        yield LocalDirectoryStore(root / "tier")
        return
    from tests.support.minio import MinioServer
    from tierlog.storage.tier.s3_store import S3Location, S3Options, S3Store

    minio = MinioServer(root / "minio").start()
    try:
        bucket = minio.create_bucket("bench")
        options = S3Options(
            endpoint_url=minio.endpoint_url, region=minio.region, path_style=True,
            credentials_path=_credentials(root, minio.access_key_id, minio.secret_access_key),
        )  # fmt: skip
        store = S3Store(S3Location(bucket, "tier"), options)
        try:
            yield store
        finally:
            store.close()
    finally:
        minio.stop()


def _credentials(root: Path, key_id: str, secret: str) -> Path:
    path = root / "credentials"
    path.write_text(f"access_key_id={key_id}\nsecret_access_key={secret}\n")
    return path


def new_reader(store: ObjectStore, cache_dir: Path, prefetch_chunks: int = 2) -> RemoteLogReader:
    shutil.rmtree(cache_dir, ignore_errors=True)
    cache = ChunkCache(cache_dir, chunk_bytes=MiB, max_bytes=1 << 40, max_entries=1 << 20)
    return RemoteLogReader(RangeReader(store, cache, prefetch_chunks=prefetch_chunks))


def read_through(read: Callable[[int], bytes], end_offset: int) -> tuple[int, float]:
    """Bytes read front to back up to ``end_offset``, and the seconds it took."""
    started = time.perf_counter()
    offset, total = 0, 0
    while offset < end_offset:
        records = read(offset)
        total += len(records)
        *_, last = iter_batches(records)
        offset = last.next_offset
    return total, time.perf_counter() - started


def latencies_ms(read: Callable[[int], bytes], offsets: list[int]) -> list[float]:
    samples = []
    for offset in offsets:
        started = time.perf_counter()
        assert read(offset)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def one_run(
    log: Log, store: ObjectStore, end: int, offsets: list[int], scratch: Path
) -> dict[str, float]:
    figures: dict[str, float] = {}

    def local(offset: int) -> bytes:
        return log.read(offset, FETCH_BYTES).records

    size, seconds = read_through(local, end)
    figures["local MiB/s"] = size / MiB / seconds
    reader = new_reader(store, scratch / "cache")
    try:

        def remote(offset: int) -> bytes:
            return reader.read(TP, offset, FETCH_BYTES)

        for label in ("cold", "warm"):
            remote_size, seconds = read_through(remote, end)
            assert remote_size == size
            figures[f"remote {label} MiB/s"] = remote_size / MiB / seconds
    finally:
        reader.ranges.close()
    figures |= ttfb("local", local, offsets)
    cold = new_reader(store, scratch / "cache-ttfb", prefetch_chunks=0)
    try:

        def first_byte(offset: int) -> bytes:
            return cold.read(TP, offset, FETCH_BYTES)

        figures |= ttfb("remote cold", first_byte, offsets)
        figures |= ttfb("remote warm", first_byte, offsets)
    finally:
        cold.ranges.close()
    return figures


def ttfb(label: str, read: Callable[[int], bytes], offsets: list[int]) -> dict[str, float]:
    samples = latencies_ms(read, offsets)
    return {
        f"{label} p50 ms": percentile(samples, 0.5),
        f"{label} p99 ms": percentile(samples, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--store", choices=("s3", "local"), default="s3")
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="remote-fetch-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        log = write_log(scratch / "bench-0", args.mib)
        with tier_store(args.store, scratch) as store:
            started = time.perf_counter()
            end = tier_closed_segments(store, TP, log).end_offset
            print(f"tiered {end} offsets in {time.perf_counter() - started:.1f}s")
            rng = random.Random(2)
            # Offsets ~2 MiB apart: each cold sample starts in a chunk no other one read.
            offsets = sorted(rng.sample(range(0, end, max(end // args.samples, 1)), args.samples))
            runs = [one_run(log, store, end, offsets, scratch) for _ in range(args.runs)]
        log.close()
    load_at_end = os.getloadavg()
    print(f"\n{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}, "
          f"Python {platform.python_version()}; store: {args.store}, log {args.mib} MiB, "
          f"{args.runs} runs, {args.samples} TTFB offsets")  # fmt: skip
    print(f"load average (1, 5, 15 min) at start {load_at_start}, at end {load_at_end}\n")
    print("| figure | median | min | max |")
    print("|---|---|---|---|")
    for name in runs[0]:
        values = [run[name] for run in runs]
        print(
            f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |"
        )
    local = statistics.median(run["local MiB/s"] for run in runs)
    for label in ("remote cold", "remote warm"):
        remote = statistics.median(run[f"{label} MiB/s"] for run in runs)
        print(f"{label} / local throughput: {remote / local:.2f}x")


if __name__ == "__main__":
    main()
