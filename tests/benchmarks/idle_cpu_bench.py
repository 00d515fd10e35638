"""Issue 32: the CPU one broker spends while its partitions are idle.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.idle_cpu_bench --partitions 2000 --seconds 30
    .venv/bin/python -m tests.benchmarks.idle_cpu_bench --before /tmp/old   # git archive export

One ``tierlog-sidecar`` with ``--partitions`` partitions of one topic, each written once
(one batch of 10 records of 1 KiB: every log has a segment, indexes and a flush to
make), then left alone. Two setups: *standalone* (no replication) and *replicated*, a
cluster of one broker over a directory partition-state store (``tierlog.cluster.brokers``
names only itself, ``tierlog.replication.state.dir``): the broker polls the store every
``tierlog.replication.state.poll.ms`` (100 ms) and runs its controller. After
``--settle-s`` (the first flushes and checkpoints), the broker's CPU time (``utime +
stime`` of ``/proc/PID/stat``, every thread) over ``--seconds`` is its idle CPU, printed
as a share of one core. With ``--before DIR`` (an older commit's ``git archive``), the
same with that code first on the Python path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import grpc

from tests.benchmarks.kafka_comparison_bench import machine, progress
from tests.benchmarks.restart_bench import TOPIC, Tierlog
from tests.support.sidecars import free_port
from tierlog.api.v1 import admin_service_pb2, admin_service_pb2_grpc

RECORDS = 10
SETUPS = ("standalone", "replicated")


def cpu_seconds(pid: int) -> float:
    """User and system CPU of the process (every thread) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(data_dir: Path, setup: str, pythonpath: str | None) -> Tierlog:
    if setup == "standalone":
        broker = Tierlog(data_dir, pythonpath=pythonpath)
        broker.start()
        return broker
    port = free_port()  # the broker list names it
    configs = (
        "node.id=0",
        f"tierlog.cluster.brokers=0@127.0.0.1:{port}",
        f"tierlog.replication.state.dir={data_dir.parent / 'state'}",
    )
    broker = Tierlog(data_dir, pythonpath=pythonpath, configs=configs, port=port)
    broker.start()
    return broker


def wait_until_led(broker: Tierlog, partitions: int) -> None:
    """Every partition known with a leader (a replicated broker applies the store's
    state at its next poll)."""
    deadline = time.monotonic() + 600
    with grpc.insecure_channel(broker.process.address) as channel:
        admin = admin_service_pb2_grpc.AdminServiceStub(channel)
        while True:
            answer = admin.Metadata(admin_service_pb2.MetadataRequest(topics=[TOPIC]), timeout=60)
            led = sum(p.leader_id >= 0 for t in answer.topics for p in t.partitions)
            if led == partitions:
                return
            assert time.monotonic() < deadline, f"only {led} of {partitions} partitions led"
            time.sleep(0.5)


def idle_share(broker: Tierlog, settle_s: float, seconds: float) -> float:
    time.sleep(settle_s)
    pid = broker.process.process.pid
    before, started = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.monotonic() - started)


def measure(
    workdir: Path, setup: str, partitions: int, args: argparse.Namespace, before: str | None
) -> float:
    here = workdir / f"{setup}-{partitions}-{'before' if before else 'after'}"
    broker = start(here / "data", setup, before)
    try:
        broker.create(partitions)
        wait_until_led(broker, partitions)
        broker.write(partitions, RECORDS)
        share = idle_share(broker, args.settle_s, args.seconds)
    finally:
        broker.stop()
        shutil.rmtree(here, ignore_errors=True)
    progress(f"{setup}, {partitions} partitions{' (before)' if before else ''}: {share:.1%}")
    return share


def run(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="tierlog-idle-cpu-"))
    load_before = os.getloadavg()[0]
    rows = []
    try:
        for partitions in (int(each) for each in args.partitions.split(",")):
            for setup in SETUPS:
                cells = []
                if args.before:
                    old = f"{args.before}/storage:{args.before}/sidecar"
                    cells.append(f"{measure(workdir, setup, partitions, args, old):.1%}")
                cells.append(f"{measure(workdir, setup, partitions, args, None):.1%}")
                rows.append(f"| {partitions:,} | {setup} | {' | '.join(cells)} |")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"Machine: {machine()}.")
    print(
        f"{args.seconds:.0f} s measured after {args.settle_s:.0f} s idle; 1-minute load "
        f"average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after."
    )
    print()
    before = "before | " if args.before else ""
    print(f"| partitions | setup | {before}idle CPU (share of a core) |")
    print(f"|---|---|{'---|' * (2 if args.before else 1)}")
    print("\n".join(rows))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", default="2000", help="comma-separated counts")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured")
    parser.add_argument("--settle-s", type=float, default=10.0, help="idle before measuring")
    parser.add_argument("--before", help="an older commit's export (git archive) to compare")
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
