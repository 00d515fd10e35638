"""Issue 32: the controller's failover pass in-process, at 2,000 and 10,000 partitions.

One topic of N partitions, replication factor 3 over ``--brokers`` brokers (3 by
default: each leads a third and follows the rest; with more, partition p is on brokers
p, p + 1 and p + 2 modulo their count), in the directory store of ``tierlog cluster up`` or the
Kubernetes store against the tests' etcd and kube-apiserver. The controller runs on a
clock of its own: its first pass reads every lease and topic, then brokers 0 and 1
renew and the clock moves past a lease, so broker 2 is fenced and the next pass (the
*failover pass*) takes it out of every ISR it is in and elects a new leader where it
led, a write per part of the topic. The partitions' state, the store's code and its I/O are
the real ones; only the lease's wait is skipped. Per N: the median of ``--runs`` fresh
stores, of the first pass, the failover pass (wall clock, and the CPU time of its
thread: the figure a loaded machine moves least) and the idle pass after it.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.controller_pass_bench --partitions 2000 10000
    .venv/bin/python -m tests.benchmarks.controller_pass_bench --store kube   # needs make tools
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.benchmarks.kafka_comparison_bench import machine
from tests.benchmarks.scale_sim import Stores
from tierlog.controller.controller import Controller
from tierlog.partition_state.model import PartitionState
from tierlog.partition_state.store import PartitionStateStore

VICTIM = 2
REPLICATION_FACTOR = 3
LEASE_S = 9.0
TOPIC = "scale"


class _Clock:
    """The controller's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def measure_passes(
    store: PartitionStateStore, partitions: int, brokers: int
) -> tuple[float, float, float, float]:
    """(first pass s, failover pass s, its CPU s, idle pass s) over a fresh ``store``."""
    placed = {
        p: PartitionState.new(tuple((p + i) % brokers for i in range(REPLICATION_FACTOR)))
        for p in range(partitions)
    }
    store.create_topic(TOPIC, placed)
    holders = {broker: f"bench-{broker}" for broker in range(brokers)}
    for broker, holder in holders.items():
        store.acquire_lease(broker, holder, LEASE_S)
    clock = _Clock()
    controller = Controller(store, clock=clock)
    first = _timed(controller.step)
    for broker in holders:
        if broker != VICTIM:
            store.renew_lease(broker, holders[broker])
    clock.now = LEASE_S + 1
    started, started_cpu = time.perf_counter(), time.thread_time()
    changes = controller.step()
    failover, failover_cpu = time.perf_counter() - started, time.thread_time() - started_cpu
    held = sum(VICTIM in state.replicas for state in placed.values())
    assert VICTIM not in controller.live and len(changes) == held, len(changes)
    idle = _timed(controller.step)
    return first, failover, failover_cpu, idle


def _timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("local", "kube"), default="local")
    parser.add_argument("--partitions", type=int, nargs="+", default=[2000, 10_000])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, help="where the stores live (default: a tmp dir)")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tierlog-ctlpass-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"# {machine()}; load average {os.getloadavg()[0]:.1f} at start", flush=True)
    print(f"# {' '.join(sys.argv)}", flush=True)
    print(
        "| store | brokers | partitions | first pass s | failover pass s | its CPU s | idle pass s "
        "| every failover pass s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    stores = Stores(args.store, workdir)
    try:
        for partitions in args.partitions:
            runs = []
            for _ in range(args.runs):
                with stores.fresh() as store:
                    runs.append(measure_passes(store, partitions, args.brokers))
            first, failover, cpu, idle = (statistics.median(c) for c in zip(*runs, strict=True))
            every = ", ".join(f"{run[1]:.3f}" for run in runs)
            print(
                f"| {args.store} | {args.brokers} | {partitions:,} | {first:.3f} | "
                f"{failover:.3f} | {cpu:.3f} | {idle:.4f} | {every} |",
                flush=True,
            )
    finally:
        stores.stop()
    print(f"# load average {os.getloadavg()[0]:.1f} at end", flush=True)


if __name__ == "__main__":
    main()
