"""Kafka's and tierlog's clusters up side by side, and what a benchmark reads of their
processes: CPU time, run-queue wait and resident memory from ``/proc``.

Shared by the benchmarks that set the two beside each other (``kafka_listener_bench``,
``acks_all_bench``, ``partition_scale_bench``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from tests.benchmarks.kafka_comparison_bench import MIB, RECORD_BYTES
from tests.benchmarks.replication_bench import wait_until
from tests.interop.kafka import KafkaCluster, KafkaTools
from tests.support.local_cluster import running_cluster
from tierlog.cli.local_cluster import read_cluster
from tierlog.client import AdminClient

__all__ = [
    "TierlogBrokers",
    "Usage",
    "autogroup_of",
    "clusters",
    "parse_autogroup",
    "process_usage",
    "resident_bytes",
    "sidelined",
    "sidelined_unless",
    "usage",
]

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_AUTOGROUPS = Path("/proc/self/autogroup")  # absent where the kernel has none


class Usage(NamedTuple):
    """Seconds a process's threads spent on a CPU, and runnable but waiting for one."""

    cpu_s: float
    run_queue_s: float

    def since(self, before: Usage) -> Usage:
        return Usage(self.cpu_s - before.cpu_s, self.run_queue_s - before.run_queue_s)

    def per_mib(self, records: int) -> Usage:
        mib = records * RECORD_BYTES / MIB
        return Usage(self.cpu_s / mib, self.run_queue_s / mib)


def process_usage(pid: int) -> Usage:
    """``pid``'s CPU time so far (user plus system, every thread: proc(5) stat fields 14
    and 15) and its threads' run-queue wait (field 2 of each ``task/*/schedstat``): on a
    shared machine the second says how long the broker was ready but not running."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
    waited_ns = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread that ended
            waited_ns += int((task / "schedstat").read_text().split()[1])
    return Usage((int(fields[11]) + int(fields[12])) / CLOCK_TICKS, waited_ns / 1e9)


def usage(pids: Sequence[int]) -> Usage:
    """A cluster's usage so far: its processes' summed."""
    each = [process_usage(pid) for pid in pids]
    return Usage(sum(u.cpu_s for u in each), sum(u.run_queue_s for u in each))


def resident_bytes(pid: int) -> int:
    """``pid``'s resident set now (``VmRSS`` of ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ProcessLookupError(f"no VmRSS for pid {pid} (a zombie?)")


def _threads(pids: Sequence[int]) -> Iterator[int]:
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            yield int(task.name)


def _set_policy(pids: Sequence[int], policy: int) -> None:
    for tid in _threads(pids):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setscheduler(tid, policy, os.sched_param(0))


def parse_autogroup(text: str) -> tuple[str, int] | None:
    """The autogroup (sched(7)) and its nice value that ``/proc/PID/autogroup`` reads
    (``/autogroup-25 nice 0``); None where the file is empty, as the kernel leaves it for
    a process its autogroups do not schedule (both processes CI's tests started on 2026-12-02
    read so, the one started in a session of its own included)."""
    if not text.strip():
        return None
    name, _, nice = text.split()
    return name, int(nice)


def autogroup_of(pid: int) -> tuple[str, int] | None:
    """``pid``'s autogroup and its nice value now (``parse_autogroup``)."""
    return parse_autogroup(Path(f"/proc/{pid}/autogroup").read_text())


def _set_autogroup_nice(pid: int, nice: int) -> None:
    Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")


@contextlib.contextmanager
def sidelined(pids: Sequence[int]) -> Iterator[None]:
    """The processes ``pids`` at the lowest CPU priority meanwhile, then as they were.

    Two clusters up side by side on two CPUs tax each other: on 2026-11-30 Kafka's idle
    JVMs ran 97-204 ms during each of the listener's 1.7 s consume loops, the idle sidecars
    38-84 ms during Kafka's. Sidelined, the cluster not being measured still runs (its
    leases and heartbeats go on, so nothing expires as it would if it were stopped) but
    only on CPU time the measured one leaves. Each broker runs in a session of its own, so
    with the kernel's autogroups on (sched(7)) CPU is shared between sessions first and a
    thread's policy counts only inside its own: each process's autogroup is set to nice 19
    (a weight of 15 against 1,024), and every thread to ``SCHED_IDLE`` for a kernel
    without autogroups, or for processes in none (their threads then compete one by one
    at the root, where the policy does count)."""
    groups: dict[int, tuple[str, int]] = {}
    if _AUTOGROUPS.exists():
        groups = {pid: group for pid in pids if (group := autogroup_of(pid)) is not None}
        own = autogroup_of(os.getpid())
        if own is not None and any(name == own[0] for name, _ in groups.values()):
            raise RuntimeError("a sidelined process shares the benchmark's own autogroup")
    for pid in groups:
        _set_autogroup_nice(pid, 19)
    _set_policy(pids, os.SCHED_IDLE)
    try:
        yield
    finally:
        _set_policy(pids, os.SCHED_OTHER)
        for pid, (_, nice) in groups.items():
            _set_autogroup_nice(pid, nice)


def sidelined_unless(compete: bool, pids: Sequence[int]) -> contextlib.AbstractContextManager[None]:
    """``sidelined(pids)``, or nothing when the benchmark was asked to let them compete."""
    return contextlib.nullcontext() if compete else sidelined(pids)


@dataclass(frozen=True)
class TierlogBrokers:
    """A ``tierlog cluster up``'s brokers: their Kafka listeners, where Kafka's tools
    connect, their gRPC addresses, where ``tierlog perf`` does, and their pids."""

    bootstrap_server: str
    grpc_addresses: tuple[str, ...]
    pids: tuple[int, ...]

    @classmethod
    def of_cluster(cls, directory: Path) -> TierlogBrokers:
        cluster = read_cluster(directory)
        pids = tuple(broker.pid for broker in cluster.brokers if broker.pid is not None)
        return cls(cluster.kafka_bootstrap, tuple(b.address for b in cluster.brokers), pids)

    @property
    def servers(self) -> str:
        return ",".join(self.grpc_addresses)

    def create_topic(self, topic: str) -> None:
        """Over gRPC with the cluster's default replication factor (a replica on every
        broker, up to 3); back once every broker knows it, so that no client's first
        request reaches a broker that has not yet heard of it from the store."""
        with AdminClient(self.grpc_addresses[0]) as admin:
            admin.create_topic(topic)
        for address in self.grpc_addresses:
            with AdminClient(address) as admin:
                wait_until(lambda: topic in admin.list_topics(), f"{address} to hold {topic}")


@contextlib.contextmanager
def clusters(
    tools: KafkaTools,
    workdir: Path,
    broker_count: int,
    *,
    start_timeout_s: float = 120.0,
    base_port: int | None = None,
) -> Iterator[tuple[KafkaCluster, TierlogBrokers]]:
    """Kafka's and tierlog's clusters of ``broker_count`` brokers, up together (tierlog's
    on ports from ``base_port`` when given, each JVM given ``start_timeout_s`` to start)."""
    tierlog_dir = workdir / "tierlog"
    kafka = KafkaCluster(
        tools,
        workdir / "kafka",
        broker_count,
        start_timeout_s=start_timeout_s,
        combined_controller=True,
    )
    with kafka, running_cluster(tierlog_dir, broker_count, base_port=base_port):
        yield kafka, TierlogBrokers.of_cluster(tierlog_dir)
