"""Issue 32: creating a broker's replicas at start, in-process.

A started ``LogManager`` on one log dir creates N new partitions' logs from
``TRANSITIONS_IN_FLIGHT`` threads at once, as a starting broker's replica manager
applies the roles the store gives it (``ReplicaManager.apply_all``, each creation in a
thread of its own). Every file and fsync is the real one. Per N: the median of
``--runs`` fresh log dirs, in logs created a second.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.log_creation_bench --logs 2000 --dir /tmp/creation
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.benchmarks.kafka_comparison_bench import machine
from tierlog.replication.replica_manager import TRANSITIONS_IN_FLIGHT
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.topic_partition import TopicPartition


def logs_per_second(log_dir: Path, logs: int, threads: int) -> float:
    manager = LogManager(LogManagerConfig((log_dir,)))
    manager.startup()
    try:
        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(
                pool.map(
                    manager.get_or_create_log, (TopicPartition("scale", p) for p in range(logs))
                )
            )
        return logs / (time.perf_counter() - started)
    finally:
        manager.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", type=int, nargs="+", default=[2000])
    parser.add_argument("--threads", type=int, default=TRANSITIONS_IN_FLIGHT)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="where the log dirs go (default: a tmp dir)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="tierlog-creation-", dir=args.dir))
    print(f"# {machine()}; load average {os.getloadavg()[0]:.1f} at start", flush=True)
    print(f"# {' '.join(sys.argv)}", flush=True)
    print("| logs | threads | logs/s (median) | every run |")
    print("|---|---|---|---|")
    try:
        for logs in args.logs:
            rates = []
            for run in range(args.runs):
                rates.append(logs_per_second(root / f"{logs}-{run}", logs, args.threads))
                shutil.rmtree(root / f"{logs}-{run}")
            every = ", ".join(f"{rate:.0f}" for rate in rates)
            print(f"| {logs:,} | {args.threads} | {statistics.median(rates):.0f} | {every} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"# load average {os.getloadavg()[0]:.1f} at end", flush=True)


if __name__ == "__main__":
    main()
