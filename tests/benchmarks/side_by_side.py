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
    "clusters",
    "process_usage",
    "resident_bytes",
    "usage",
]

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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
