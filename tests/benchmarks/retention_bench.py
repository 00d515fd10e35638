"""Retention benchmark for issue 3: one retention pass over a log of 10,000 segments.

Run with ``.venv/bin/python tests/benchmarks/retention_bench.py``. The log is real (one
file set per segment on disk, opened by ``Log.open`` as after a restart, indexes lazy).
Two passes are timed, each repeated, medians reported:
- a pass that checks every segment and deletes nothing (the common case: the size
  rule must add up the whole log, the time rule looks at the oldest segment);
- a pass that retires the 100 oldest segments (renames 300 files to ``.deleted``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log
from tierlog.storage.records import SimpleRecord, build_batch

T0 = 1_700_000_000_000
HOUR_MS = 3_600_000


def build_log(directory: Path, segments: int) -> LogConfig:
    config = LogConfig.from_properties(
        {
            "segment.bytes": "200",  # every append rolls: one batch per segment
            "segment.index.bytes": "4096",
            "message.timestamp.after.max.ms": str(2**62),
        }
    )
    log = Log.open(directory, config, clock_ms=lambda: T0)
    for i in range(segments):
        log.append(build_batch([SimpleRecord(b"k%d" % i, b"v" * 100, T0 + i * 1000)]))
    log.close()
    return config


def timed_ms(action: object) -> float:
    assert callable(action)
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--segments", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="tierlog-retention-bench-"))
    try:
        started = time.perf_counter()
        base = build_log(scratch / "t-0", args.segments)
        built_s = time.perf_counter() - started
        now = T0 + args.segments * 1000
        size = sum(p.stat().st_size for p in (scratch / "t-0").glob("*.log"))
        keep_all = LogConfig.from_properties(
            {"retention.ms": str(100 * HOUR_MS), "retention.bytes": str(size)}, base
        )
        log = Log.open(scratch / "t-0", keep_all, clean_shutdown=True, clock_ms=lambda: now)
        assert len(log.segments) >= args.segments
        check_only = [
            timed_ms(lambda: log.delete_old_segments(now_ms=now)) for _ in range(args.runs)
        ]
        log.close()

        samples = []
        for run in range(args.runs):
            log = Log.open(scratch / "t-0", base, clean_shutdown=True, clock_ms=lambda: now)
            oldest_kept = log.segments[100].largest_timestamp
            log.update_config(
                LogConfig.from_properties({"retention.ms": str(now - oldest_kept + 1)}, base)
            )
            count = len(log.segments)
            samples.append(timed_ms(lambda log=log: log.delete_old_segments(now_ms=now)))
            assert len(log.segments) == count - 100, (run, len(log.segments), count)
            log.delete_retired_files(now + 10**9)
            log.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"log of {args.segments} segments built in {built_s:.1f}s; {os.cpu_count()} cores")
    print(f"runs per figure: {args.runs} (median)\n")
    print("| retention pass over a 10,000-segment log | median | max |")
    print("|---|---|---|")
    print(
        f"| checks every segment, deletes nothing | {statistics.median(check_only):.1f} ms "
        f"| {max(check_only):.1f} ms |"
    )
    print(
        f"| retires the 100 oldest segments | {statistics.median(samples):.1f} ms "
        f"| {max(samples):.1f} ms |"
    )


if __name__ == "__main__":
    main()
