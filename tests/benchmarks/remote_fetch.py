"""Remote fetch from the tier beside local fetch of the same data: the fetch half of
``tier_bench`` (issue 5).

Given a log whose closed segments the tier holds, ``one_run`` measures, side by side
on the same offsets:

- throughput: the log read front to back in 1 MiB fetches (``max_bytes``) locally
  (``Log.read``, page cache warm), from the tier cold (an empty chunk cache: every
  chunk a ranged GET, prefetch on) and warm (the same reader again: every chunk from
  the disk cache);
- time to first byte: one 1 MiB fetch at each of the given offsets (the fetch returns
  all its bytes at once, so this is its latency), locally, from the tier cold (a
  fresh, empty cache, prefetch off; offsets in distinct chunks) and warm.

The reads are the storage layer's (``RemoteLogReader``, ``Log.read``), without gRPC:
what the tier adds to a fetch. ``table`` gives medians over runs; p50/p99 within a
run, then the median of each over runs.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import SimpleRecord, build_batch, iter_batches
from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.range_reader import RangeReader
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.topic_partition import TopicPartition

MiB = 1 << 20
FETCH_BYTES = MiB
TP = TopicPartition("bench", 0)


def write_log(directory: Path, segments: int, segment_mib: int) -> Log:
    """``segments`` closed segments of ``segment_mib`` MiB (1 KiB random records in
    64-record batches), then the active one with the batch that rolled the last."""
    config = LogConfig.from_properties(
        {"segment.bytes": str(segment_mib * MiB), "remote.storage.enable": "true"}
    )
    log = Log.open(directory, config)
    rng = random.Random(1)
    timestamp = 1_700_000_000_000
    while len(log.segments) <= segments:
        records = [SimpleRecord(b"k%d" % i, rng.randbytes(1024), timestamp + i) for i in range(64)]
        log.append(build_batch(records))
        timestamp += 64
    log.flush()
    return log


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


def ttfb_offsets(end_offset: int, samples: int) -> list[int]:
    """``samples`` offsets spread evenly at random over ``[0, end_offset)``: each cold
    sample starts in a chunk no other one read."""
    step = max(end_offset // samples, 1)
    return sorted(random.Random(2).sample(range(0, end_offset, step), samples))


def table(runs: list[dict[str, float]]) -> list[str]:
    """Markdown rows: each figure's median (min-max) over runs, local beside the tier."""
    rows = [
        "| figure | local (`Log.read`) | tier, cold (MinIO) | tier, warm (disk cache) |",
        "|---|---|---|---|",
    ]

    def cell(name: str) -> str:
        values = [run[name] for run in runs]
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    rows.append(
        "| throughput, MiB/s | "
        + " | ".join(cell(f"{label} MiB/s") for label in ("local", "remote cold", "remote warm"))
        + " |"
    )
    for percent in ("p50", "p99"):
        rows.append(
            f"| time to first byte {percent}, ms | "
            + " | ".join(
                cell(f"{label} {percent} ms") for label in ("local", "remote cold", "remote warm")
            )
            + " |"
        )
    return rows
