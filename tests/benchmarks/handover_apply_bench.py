"""Issue 32: how long a survivor's event loop is held while it applies a SIGTERM hand-over.

One topic of N partitions, replication factor 3 over brokers 0-2 (partition p on p, p + 1
and p + 2 modulo 3), in the directory store. Broker 0's real ``ReplicaManager`` over real
logs applies the topic (it leads a third and follows the rest), then broker 2 hands its
leaderships over (``hand_over_leaderships``, as its SIGTERM does) and broker 0 applies
that: a third of the partitions become its leaderships (each a new leader epoch's
checkpoint in the role changes' pool), the rest are ISR changes and new leaders to follow.
Its followers' fetchers dial an address nobody listens on: they fail and back off, as
they would while the leader they name is not up yet.

Beside the apply, a task sleeps 1 ms at a time and records how late it wakes: the *loop
lag*. A Metadata request that reaches the survivor during the apply waits about that
long to be read, so the lag's largest values are what the cluster benchmark's *SIGTERM
led again* sees on tierlog's side (docs/BENCHMARKS.md). Per ``--in-flight`` value (the
role changes side by side, ``TRANSITIONS_IN_FLIGHT``), taking turns, the median of
``--runs`` fresh stores of: the apply's wall time, the largest loop lag, and the lag
summed over the wakes more than 5 ms late.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.handover_apply_bench --partitions 2000 --in-flight 32 4
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from tests.benchmarks.scratch import machine_line, run_in_scratch
from tierlog.broker.topics import TopicStore
from tierlog.broker.watch import AppendWatch
from tierlog.controller.controlled_shutdown import hand_over_leaderships
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import PartitionState
from tierlog.replication import replica_manager
from tierlog.replication.config import DirectoryStore, ReplicationConfig
from tierlog.storage.config import LogConfig
from tierlog.storage.manager import LogManager, LogManagerConfig

BROKERS = 3
STOPPING = 2
TOPIC = "handover"
NOBODY = "127.0.0.1:9"  # the discard port: nothing listens on loopback
PROBE_S = 0.001
LATE_S = 0.005


@dataclass(frozen=True)
class Applied:
    wall_s: float
    lag_max_s: float
    lag_late_s: float  # summed over the wakes more than LATE_S late


async def _lag_while(work: asyncio.Task[None]) -> list[float]:
    """How late each 1 ms sleep woke while ``work`` ran."""
    loop = asyncio.get_running_loop()
    lags = []
    while not work.done():
        asleep = loop.time()
        await asyncio.sleep(PROBE_S)
        lags.append(loop.time() - asleep - PROBE_S)
    return lags


async def _apply_hand_over(root: Path, partitions: int) -> Applied:
    store = LocalStateStore(root / "state")
    (root / "data").mkdir()
    logs = LogManager(LogManagerConfig(log_dirs=(root / "data",)))
    replicas = replica_manager.ReplicaManager(
        0,
        lambda: 1,
        store,
        logs,
        TopicStore([root / "data"], LogConfig()),
        AppendWatch(),
        lambda: {1: NOBODY, 2: NOBODY},
        grpc.aio.insecure_channel,
        [],
        ReplicationConfig(store=DirectoryStore(root / "state")),
    )
    try:
        placed = {
            p: PartitionState.new(tuple((p + i) % BROKERS for i in range(BROKERS)))
            for p in range(partitions)
        }
        store.create_topic(TOPIC, placed)
        await replicas.poll_once()
        await asyncio.to_thread(hand_over_leaderships, store, STOPPING, {0, 1})
        started = time.perf_counter()
        applying = asyncio.create_task(replicas.poll_once())
        lags = await _lag_while(applying)
        await applying
        wall_s = time.perf_counter() - started
        await replicas.stop()
    finally:
        logs.shutdown()
    return Applied(wall_s, max(lags), sum(lag for lag in lags if lag > LATE_S))


def measure(partitions: int, in_flight: int, workdir: Path | None) -> Applied:
    """One fresh store and log dir, its hand-over applied with ``in_flight`` role changes
    side by side."""
    replica_manager.TRANSITIONS_IN_FLIGHT = in_flight  # read by each apply_all
    result: list[Applied] = []

    def run(scratch: Path) -> None:
        result.append(asyncio.run(_apply_hand_over(scratch, partitions)))

    run_in_scratch("handover-apply-", workdir, run)
    return result[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[32])
    parser.add_argument("--runs", type=int, default=3, help="medians reported")
    parser.add_argument("--workdir", type=Path, help="under this dir (default: the temp dir)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the brokers' per-partition lines: not what is timed
    print(machine_line())
    runs: dict[int, list[Applied]] = {n: [] for n in args.in_flight}
    for run in range(args.runs):
        for in_flight in args.in_flight:
            applied = measure(args.partitions, in_flight, args.workdir)
            runs[in_flight].append(applied)
            print(
                f"run {run + 1}, {in_flight} in flight: apply {applied.wall_s:.3f} s, "
                f"loop lag max {applied.lag_max_s * 1000:.1f} ms, "
                f"late {applied.lag_late_s * 1000:.0f} ms",
                flush=True,
            )
    late_ms = f"{LATE_S * 1000:.0f}"
    print(f"\n| in flight | apply s | loop lag max ms | lag over {late_ms} ms, summed ms |")
    print("|---|---|---|---|")
    for in_flight, each in runs.items():
        print(
            f"| {in_flight} | {statistics.median(a.wall_s for a in each):.3f} "
            f"| {statistics.median(a.lag_max_s for a in each) * 1000:.1f} "
            f"| {statistics.median(a.lag_late_s for a in each) * 1000:.0f} |"
        )
    print(f"\n{args.partitions} partitions, medians of {args.runs} runs, in-flight values in turn")


if __name__ == "__main__":
    main()
