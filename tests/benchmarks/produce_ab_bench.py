"""Produce throughput and the sidecar's CPU per MiB, this code against an older commit's.

Run with ``.venv/bin/python -m tests.benchmarks.produce_ab_bench --before DIR`` where
``DIR`` holds an export of the older commit (``git archive <commit> storage sidecar |
tar -x -C DIR``).  Two ``tierlog-sidecar`` processes run side by side, the "before" one
with ``DIR/storage:DIR/sidecar`` first on its ``PYTHONPATH``; the client is this
checkout's ``tierlog perf produce`` for both, so only the server differs.  Each round
produces to both, in alternating order, for every case (record size, batch size,
codec); the medians of the rounds are printed: records/s as the producer saw them, and
the sidecar's own CPU seconds (user + system, from ``/proc``) per MiB of records, which
the shared machine's noise disturbs far less than throughput.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks.kafka_comparison_bench import (
    TIERLOG_BIN,
    parse_produce,
    run_client,
)
from tests.benchmarks.kafka_comparison_bench import sidecar as started_sidecar
from tierlog.client.admin import AdminClient
from tierlog.client.errors import NetworkError

MIB = 1024 * 1024
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Case:
    record_bytes: int
    batch_bytes: int
    codec: str
    records: int

    @property
    def name(self) -> str:
        batch = f"{self.batch_bytes // 1024} KiB" if self.batch_bytes < MIB else "1 MiB"
        return f"{self.record_bytes} B records, {batch} batches, {self.codec}"


# Enough records a run that the sidecar's CPU, counted in 10 ms ticks, reads to ~0.1 ms/MiB.
CASES = (
    Case(1024, MIB, "none", 150_000),
    Case(1024, 64 * 1024, "none", 150_000),
    Case(100, MIB, "none", 1_000_000),
    Case(1024, MIB, "lz4", 400_000),
)


@dataclass
class Server:
    name: str
    address: str
    pid: int

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


@contextlib.contextmanager
def sidecar(name: str, data_dir: Path, pythonpath: str | None) -> Iterator[Server]:
    with started_sidecar(data_dir, name=name, pythonpath=pythonpath) as (address, pid):
        yield Server(name, address, pid)


def admin_call(server: Server, call: Callable[[AdminClient], None], attempts: int = 3) -> None:
    """``call`` on an admin client of ``server``, again when the loaded machine made the
    connection time out (it happens with a dozen runnable processes on two cores)."""
    for attempt in range(attempts):
        try:
            with AdminClient(server.address) as admin:
                call(admin)
            return
        except NetworkError:
            if attempt == attempts - 1:
                raise


def produce(server: Server, topic: str, case: Case) -> tuple[float, float]:
    """One run: records/s, and the sidecar's CPU seconds per MiB of records."""
    admin_call(server, lambda admin: admin.create_topic(topic))
    props = ("acks=1", f"batch.size={case.batch_bytes}", "linger.ms=1000")
    command: list[str | Path] = [
        TIERLOG_BIN / "tierlog",
        *("perf", "produce", topic, "--server", server.address),
        *("--num-records", str(case.records), "--record-size", str(case.record_bytes)),
        *("--throughput", "-1", "--compression-type", case.codec),
        *(arg for prop in props for arg in ("--producer-props", prop)),
    ]
    cpu_before = server.cpu_seconds()
    produced = parse_produce(run_client(command))
    cpu = server.cpu_seconds() - cpu_before
    admin_call(server, lambda admin: admin.delete_topic(topic))  # the disk is shared
    return produced.records_per_s, cpu / (case.records * case.record_bytes / MIB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="export of the old commit")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    before_path = f"{args.before / 'storage'}:{args.before / 'sidecar'}"
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="produce-ab-") as scratch,
        sidecar("before", Path(scratch) / "before", before_path) as before,
        sidecar("after", Path(scratch) / "after", None) as after,
    ):
        for round_ in range(args.rounds):
            for number, case in enumerate(CASES):
                order = (before, after) if (round_ + number) % 2 == 0 else (after, before)
                for server in order:
                    topic = f"r{round_}-c{number}"
                    figures = produce(server, topic, case)
                    results.setdefault((case.name, server.name), []).append(figures)
                    print(
                        f"round {round_} {case.name} {server.name}: "
                        f"{figures[0]:,.0f} rec/s, {figures[1] * 1e3:.2f} ms CPU/MiB",
                        flush=True,
                    )
    print("\n| case | rec/s before | rec/s after | sidecar CPU per MiB before | after |")
    print("|---|---|---|---|---|")
    for case in CASES:
        old, new = results[(case.name, "before")], results[(case.name, "after")]
        print(
            f"| {case.name} | {statistics.median(r for r, _ in old):,.0f} "
            f"| {statistics.median(r for r, _ in new):,.0f} "
            f"| {statistics.median(c for _, c in old) * 1e3:.2f} ms "
            f"| {statistics.median(c for _, c in new) * 1e3:.2f} ms |"
        )


if __name__ == "__main__":
    main()
