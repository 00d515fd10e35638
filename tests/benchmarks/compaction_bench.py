"""Compaction benchmark for issue 3, measured beside the machine's own read bandwidth.

A compacted log of 100-byte keys and 1 KiB values where 10% of the records carry
distinct keys (each key written ten times, in random order) is cleaned in one round
with a map big enough for all keys. Reported: MB/s of log cleaned (bytes of the
segments read and rewritten, over the wall time of the round: map, rewrite, swap),
the plain sequential ``pread`` bandwidth of the same files measured moments before, and
the peak memory per distinct key of one more, identical round traced by tracemalloc
(everything the round allocates in Python: map, the 8 MiB scan chunks, the write
buffer), beside what the offset map accounts per key. Speeds are medians over
``--runs``.

Run with ``.venv/bin/python tests/benchmarks/compaction_bench.py`` (about a minute).
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
import tracemalloc
from pathlib import Path

from tierlog.storage.cleaner import Cleaner, CleanResult
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import CompressionType, SimpleRecord, build_batch

MiB = 1024 * 1024
KEY_BYTES = 100
VALUE_BYTES = 1024
RECORDS_PER_BATCH = 32


def config() -> LogConfig:
    return LogConfig.from_properties(
        {
            "cleanup.policy": "compact",
            "segment.bytes": 64 * MiB,
            "file.delete.delay.ms": 0,
            "message.timestamp.after.max.ms": 2**62,
        }
    )


def build_log(
    directory: Path,
    total_bytes: int,
    codec: CompressionType,
    log_config: LogConfig | None = None,
) -> tuple[int, int]:
    """The log to clean (in ``log_config``'s segments, ``config()``'s by default);
    returns (records, distinct keys)."""
    record_bytes = KEY_BYTES + VALUE_BYTES + 10
    count = total_bytes // record_bytes
    distinct = max(1, count // 10)
    rng = random.Random(42)
    keys = [b"%0*d" % (KEY_BYTES, rng.getrandbits(64)) for _ in range(distinct)]
    order = [key for key in keys for _ in range(10)]
    rng.shuffle(order)
    value = os.urandom(VALUE_BYTES)
    now = int(time.time() * 1000)
    log = Log.open(directory, log_config or config())
    for start in range(0, len(order), RECORDS_PER_BATCH):
        chunk = order[start : start + RECORDS_PER_BATCH]
        records = [
            SimpleRecord(key, value[: VALUE_BYTES - 8] + b"%08d" % i, now)
            for i, key in enumerate(chunk)
        ]
        log.append(build_batch(records, compression=codec))
    log.roll()
    log.close()
    return len(order), distinct


def raw_read_bandwidth(directory: Path) -> float:
    """Bytes/s of plain 1 MiB ``pread``s over every .log file (page cache warm)."""
    total, started = 0, time.perf_counter()
    for path in sorted(directory.glob("*.log")):
        fd = os.open(path, os.O_RDONLY)
        try:
            position = 0
            while data := os.pread(fd, MiB, position):
                position += len(data)
            total += position
        finally:
            os.close(fd)
    return total / (time.perf_counter() - started)


def clean_once(directory: Path, *, traced: bool) -> tuple[CleanResult, float, int]:
    """One round over a fresh copy; returns the result, seconds, and peak traced bytes."""
    log = Log.open(directory, config(), clean_shutdown=True)
    cleaner = Cleaner(1024 * MiB)
    if traced:
        tracemalloc.start()
    started = time.perf_counter()
    result = cleaner.clean(log, 0, log.active_segment.base_offset)
    elapsed = time.perf_counter() - started
    peak = 0
    if traced:
        _current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    log.close()
    return result, elapsed, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=None, help="scratch dir (default: a temp dir)")
    parser.add_argument("--total-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--codec", default="none", choices=[c.name.lower() for c in CompressionType]
    )
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="tierlog-compaction-bench-", dir=args.dir))
    codec = CompressionType[args.codec.upper()]
    try:
        pristine = scratch / "pristine" / "bench-0"
        count, distinct = build_log(pristine, args.total_mib * MiB, codec)
        log_bytes = sum(path.stat().st_size for path in pristine.glob("*.log"))
        speeds, raw_speeds, peaks = [], [], []
        result: CleanResult | None = None
        for run in range(args.runs + 1):  # the last run is traced: slower, same memory
            for traced in (run == args.runs,):
                copy = scratch / f"run-{run}-{traced}" / "bench-0"
                shutil.copytree(pristine, copy)
                raw_speeds.append(raw_read_bandwidth(copy))
                result, elapsed, peak = clean_once(copy, traced=traced)
                if traced:
                    peaks.append(peak)
                else:
                    speeds.append(result.stats.bytes_read / elapsed)
                shutil.rmtree(copy.parent)
        assert result is not None
        stats = result.stats
        print(
            f"machine: {platform.node()} · {os.cpu_count()} cores · "
            f"Python {platform.python_version()} · {platform.release()}"
        )
        print(
            f"log: {log_bytes / MiB:.0f} MiB, {count:,} records of {KEY_BYTES}-byte keys and "
            f"{VALUE_BYTES}-byte values ({args.codec}), {distinct:,} distinct keys (10%) · "
            f"runs: {args.runs} (median)\n"
        )
        print("| benchmark | tierlog | machine limit | ratio |")
        print("|---|---|---|---|")
        speed, raw = statistics.median(speeds), statistics.median(raw_speeds)
        print(
            f"| compaction, one round ({stats.records_retained:,} of {stats.records_read:,} "
            f"records kept, {stats.bytes_read / MiB:.0f} → {stats.bytes_written / MiB:.0f} MiB) "
            f"| {speed / 1e6:.1f} MB/s | {raw / 1e6:.0f} MB/s sequential read | {speed / raw:.3f} |"
        )
        peak_bytes = statistics.median(peaks)
        print(
            "| peak memory of a round per distinct key (tracemalloc) "
            f"| {peak_bytes / distinct:.0f} B "
            f"| {stats.map_memory_bytes / distinct:.0f} B accounted by the offset map | "
            f"{peak_bytes / stats.map_memory_bytes:.2f} |"
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
