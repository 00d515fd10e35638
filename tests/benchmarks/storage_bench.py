"""Storage benchmarks for issue 2, each measured beside the machine's own limit.

Run with ``make bench`` (or ``.venv/bin/python tests/benchmarks/storage_bench.py``).
Every figure is the median of several repetitions in this one run, printed as a
Markdown table together with its ratio to the raw page-cache bandwidth measured
moments before with plain ``os.write`` / ``os.pread`` of the same sizes.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tierlog.storage.config import LogConfig
from tierlog.storage.index import OffsetIndex
from tierlog.storage.log import Log
from tierlog.storage.records import CompressionType, SimpleRecord, build_batch

MiB = 1024 * 1024


def make_batch(batch_bytes: int, record_bytes: int = 1024) -> bytes:
    count = max(1, (batch_bytes - 61) // (record_bytes + 24))  # ~20 B of framing per record
    now = int(time.time() * 1000)
    records = [SimpleRecord(b"k%08d" % i, os.urandom(record_bytes), now, ()) for i in range(count)]
    return build_batch(records, compression=CompressionType.NONE)


def median_of(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def raw_write_bandwidth(directory: Path, chunk: bytes, total_bytes: int) -> float:
    """Bytes/s of plain sequential writes of ``chunk`` into the page cache."""
    path = directory / "raw.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    started = time.perf_counter()
    for _ in range(total_bytes // len(chunk)):
        os.write(fd, chunk)
    elapsed = time.perf_counter() - started
    os.close(fd)
    path.unlink()
    return total_bytes / elapsed


def raw_read_bandwidth(path: Path, chunk_bytes: int) -> float:
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    started = time.perf_counter()
    position = 0
    while position < size:
        position += len(os.pread(fd, chunk_bytes, position))
    elapsed = time.perf_counter() - started
    os.close(fd)
    return size / elapsed


def fresh_log(directory: Path, **overrides: str) -> Log:
    shutil.rmtree(directory, ignore_errors=True)
    config = LogConfig.from_properties(
        {"segment.bytes": str(1024 * MiB), "message.timestamp.after.max.ms": "86400000"} | overrides
    )
    return Log.open(directory, config)


def append_bandwidth(directory: Path, batch: bytes, total_bytes: int) -> float:
    log = fresh_log(directory)
    appends = total_bytes // len(batch)
    started = time.perf_counter()
    for _ in range(appends):
        log.append(batch)
    elapsed = time.perf_counter() - started
    log.close()
    return appends * len(batch) / elapsed


def sequential_read_bandwidth(log: Log, max_bytes: int) -> float:
    offset, end, read_bytes = log.log_start_offset, log.log_end_offset, 0
    started = time.perf_counter()
    while offset < end:
        result = log.read(offset, max_bytes)
        read_bytes += len(result.records)
        offset = _next_offset_after(result.records)
    elapsed = time.perf_counter() - started
    return read_bytes / elapsed


def _next_offset_after(records: bytes) -> int:
    from tierlog.storage.records import parse_header

    position, last = 0, -1
    while position < len(records):
        header = parse_header(records, position)
        last, position = header.last_offset, position + header.size
    return last + 1


def lookup_latencies_us(directory: Path, lookups: int) -> list[float]:
    """Per-lookup latency in a full 10 MiB offset index (1,310,720 entries)."""
    index_bytes = 10 * MiB
    index = OffsetIndex(directory / "full.index", 0, index_bytes, writable=True)
    for slot in range(index.max_entries):
        index.append(slot * 3 + 1, slot * 1024)
    rng = random.Random(7)
    targets = [rng.randrange(0, index.max_entries * 3) for _ in range(lookups)]
    clock = time.perf_counter_ns
    samples = []
    for target in targets:
        started = clock()
        index.lookup(target)
        samples.append((clock() - started) / 1000)
    index.close()
    return samples


def recovery_bandwidth(log_directory: Path) -> float:
    from tierlog.storage.segment import LogSegment

    segment = LogSegment(
        log_directory, 0, index_interval_bytes=4096, max_index_bytes=10 * MiB, active=True
    )
    size = segment.size
    started = time.perf_counter()
    segment.recover()
    elapsed = time.perf_counter() - started
    segment.close()
    return size / elapsed


def durable_appends(directory: Path, batch: bytes, appends: int) -> tuple[float, list[float]]:
    """Bytes/s and per-append latencies (ms) with flush.messages=1 (fsync per batch)."""
    log = fresh_log(directory, **{"flush.messages": "1"})
    latencies = []
    started = time.perf_counter()
    for _ in range(appends):
        begun = time.perf_counter()
        log.append(batch)
        latencies.append((time.perf_counter() - begun) * 1000)
    elapsed = time.perf_counter() - started
    log.close()
    return appends * len(batch) / elapsed, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=None, help="scratch dir (default: a temp dir)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--total-mib", type=int, default=1024)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(dir=args.dir, prefix="tierlog-bench-"))
    total = args.total_mib * MiB
    runs = args.runs
    rows: list[tuple[str, str, str, str]] = []

    def gbps(value: float) -> str:
        return f"{value / 1e9:.2f} GB/s"

    try:
        for label, size in (("1 MiB", MiB), ("16 KiB", 16 * 1024)):
            batch = make_batch(size)
            volume = total if size == MiB else total // 4
            raw = median_of(runs, functools.partial(raw_write_bandwidth, scratch, batch, volume))
            ours = median_of(
                runs, functools.partial(append_bandwidth, scratch / "append-0", batch, volume)
            )
            rows.append(
                (f"append {label} batches, no fsync", gbps(ours), gbps(raw), f"{ours / raw:.2f}")
            )

        # Reads of 1 MiB, as a consumer's fetches: of 1 MiB batches, and of small ones
        # (linger.ms=0 producers) where walking the batches costs more than copying them.
        for label, size, volume in (
            ("1 MiB", MiB, total),
            ("64 KiB", 64 * 1024, total // 4),
            ("1 KiB (one record)", 1024, total // 32),
        ):
            batch = make_batch(size)
            log = fresh_log(scratch / f"read-{size}")
            for _ in range(volume // len(batch)):
                log.append(batch)
            log.flush()
            segment_file = log.active_segment.log.path
            raw = median_of(runs, functools.partial(raw_read_bandwidth, segment_file, MiB))
            ours = median_of(runs, functools.partial(sequential_read_bandwidth, log, MiB))
            rows.append(
                (
                    f"sequential read of 1 MiB, {label} batches",
                    gbps(ours),
                    gbps(raw),
                    f"{ours / raw:.2f}",
                )
            )
            log.close()

        recovered = scratch / f"read-{MiB}"  # its first segment, of 1 MiB batches
        ours = median_of(runs, lambda: recovery_bandwidth(recovered))
        first_segment = recovered / "00000000000000000000.log"
        raw = median_of(runs, lambda: raw_read_bandwidth(first_segment, 8 * MiB))
        rows.append(
            ("recovery scan (CRC + index rebuild)", gbps(ours), gbps(raw), f"{ours / raw:.2f}")
        )

        samples = lookup_latencies_us(scratch, 200_000)
        p50 = statistics.median(samples)
        p99 = statistics.quantiles(samples, n=100)[98]
        rows.append(
            ("offset lookup, full 10 MiB index", f"p50 {p50:.1f} µs, p99 {p99:.1f} µs", "", "")
        )

        for label, size, appends in (("16 KiB", 16 * 1024, 400), ("1 MiB", MiB, 100)):
            rate, latencies = durable_appends(scratch / "durable-0", make_batch(size), appends)
            rows.append(
                (
                    f"append {label} batches, fsync per batch",
                    f"{rate / 1e6:.1f} MB/s",
                    f"p50 {statistics.median(latencies):.2f} ms",
                    f"p99 {statistics.quantiles(latencies, n=100)[98]:.2f} ms",
                )
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(
        f"machine: {platform.node()} · {os.cpu_count()} cores · Python {platform.python_version()}"
    )
    print(f"runs per figure: {runs} (median) · volume: {args.total_mib} MiB\n")
    print("| benchmark | tierlog | machine limit | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
