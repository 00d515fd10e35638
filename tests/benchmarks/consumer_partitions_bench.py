"""Issue 32's consumer row: one consumer reading every partition of a wide topic, tierlog's
beside Kafka's, with the threads each one's process runs.

Run from the repository root (needs the Kafka jars in ``.cache``)::

    .venv/bin/python -m tests.benchmarks.consumer_partitions_bench --partitions 10 1000 --runs 3

One Kafka 4.1.1 broker (the interop harness's single-node KRaft ``KafkaBroker``) and one
``tierlog-sidecar``, both on 127.0.0.1 and up the whole run. For each N of
``--partitions``, each gets a topic of N partitions filled with the same load: ``--records``
records of 1 KiB without a key, by Kafka's ``ProducerPerformance`` and ``tierlog perf
produce`` (``acks=1``, Kafka's default ``batch.size`` of 16 KiB, ``linger.ms=1000``: the
sticky partitioner spreads the batches over the partitions). Then ``--runs`` rounds, the
two interleaved, each consumer a process of its own reading the whole topic from the
start with 1 MiB ``max.partition.fetch.bytes``: Kafka's ``ConsumerPerformance`` (Java's
``KafkaConsumer``, subscribed, in a group of its own) and ``tierlog perf consume``
(``tierlog.client.Consumer``, every partition, no group). Figures: ``fetch.nMsg.sec``
(the join left out, as ``kafka_comparison_bench``), and the most tasks (threads,
``/proc/PID/task``) its process ran, sampled every 50 ms while it ran: the JVM's own
threads (GC, JIT...) are in Kafka's count as the interpreter's and gRPC's are in tierlog's.
Prints the machine line and a markdown table of medians (and each run's figures).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.benchmarks.kafka_comparison_bench import (
    MIB,
    PERF_TOOL_JVM_ARGS,
    RECORD_BYTES,
    REPO,
    TIERLOG_BIN,
    Consumed,
    parse_consume,
    parse_produce,
    progress,
    sidecar,
)
from tests.benchmarks.scratch import machine_line, run_in_scratch
from tests.interop.kafka import KafkaBroker, KafkaTools
from tierlog.client import AdminClient

LINGER_MS = 1000
SAMPLE_S = 0.05
CONSUME_TIMEOUT_S = 600
KAFKA, TIERLOG = "Kafka", "tierlog"


def _tasks(pid: int) -> int:
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        return sum(1 for _ in Path(f"/proc/{pid}/task").iterdir())
    return 0


def run_counting_threads(command: Sequence[str | Path]) -> tuple[str, int]:
    """One client process to its end: its stdout and the most tasks it ran at once."""
    with subprocess.Popen(
        [str(part) for part in command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    ) as process:
        peak = 0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.wait(SAMPLE_S):
                peak = max(peak, _tasks(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            stdout, stderr = process.communicate(timeout=CONSUME_TIMEOUT_S)
        finally:
            done.set()
            sampler.join()
    if process.returncode != 0:
        raise RuntimeError(
            f"exit {process.returncode}: {command}\n{stdout[-2000:]}{stderr[-2000:]}"
        )
    return stdout, peak


def _produce_props() -> tuple[str, ...]:
    return ("acks=1", f"linger.ms={LINGER_MS}")


class KafkaSide:
    name = KAFKA

    def __init__(self, tools: KafkaTools, broker: KafkaBroker) -> None:
        self.tools, self.broker = tools, broker

    def fill(self, topic: str, partitions: int, records: int) -> None:
        self.broker.create_topic(topic, partitions=partitions)
        command = self.tools.command(
            "org.apache.kafka.tools.ProducerPerformance",
            *("--topic", topic, "--num-records", str(records)),
            *("--record-size", str(RECORD_BYTES), "--throughput", "-1"),
            "--producer-props",
            f"bootstrap.servers={self.broker.bootstrap_server}",
            *_produce_props(),
            jvm_args=PERF_TOOL_JVM_ARGS,
        )
        parse_produce(run_counting_threads(command)[0])

    def consume(self, topic: str, records: int) -> tuple[Consumed, int]:
        command = self.tools.command(
            "org.apache.kafka.tools.ConsumerPerformance",
            *("--bootstrap-server", self.broker.bootstrap_server, "--topic", topic),
            *("--messages", str(records), "--fetch-size", str(MIB), "--timeout", "60000"),
            jvm_args=PERF_TOOL_JVM_ARGS,
        )
        output, peak = run_counting_threads(command)
        return parse_consume(output), peak


class TierlogSide:
    name = TIERLOG

    def __init__(self, address: str) -> None:
        self.address = address

    def fill(self, topic: str, partitions: int, records: int) -> None:
        with AdminClient(self.address) as admin:
            admin.create_topic(topic, partitions)
        command: list[str | Path] = [
            TIERLOG_BIN / "tierlog",
            *("perf", "produce", topic, "--server", self.address),
            *("--num-records", str(records), "--record-size", str(RECORD_BYTES)),
            *("--throughput", "-1"),
            *(arg for prop in _produce_props() for arg in ("--producer-props", prop)),
        ]
        parse_produce(run_counting_threads(command)[0])

    def consume(self, topic: str, records: int) -> tuple[Consumed, int]:
        command: list[str | Path] = [
            TIERLOG_BIN / "tierlog",
            *("perf", "consume", topic, "--server", self.address),
            *("--num-records", str(records), "--consumer-property"),
            f"max.partition.fetch.bytes={MIB}",
        ]
        output, peak = run_counting_threads(command)
        return parse_consume(output), peak


Side = KafkaSide | TierlogSide


def measure(
    sides: Sequence[Side], partitions: int, records: int, runs: int
) -> dict[str, list[tuple[float, int]]]:
    """Each side's (records/s, peak tasks) per run, the sides interleaved in each round."""
    topic = f"wide-{partitions}"
    for side in sides:
        progress(f"{side.name}: {partitions} partitions, {records:,} records")
        side.fill(topic, partitions, records)
    figures: dict[str, list[tuple[float, int]]] = {side.name: [] for side in sides}
    for run in range(runs):
        for side in sides:
            consumed, peak = side.consume(topic, records)
            assert consumed.records >= records, (side.name, consumed)
            figures[side.name].append((consumed.records_per_s, peak))
            progress(
                f"run {run + 1} {side.name}: {consumed.records_per_s:,.0f} rec/s, {peak} tasks"
            )
    return figures


def table(results: dict[int, dict[str, list[tuple[float, int]]]]) -> str:
    lines = [
        "| partitions | consumer | rec/s (median) | MiB/s | peak tasks (median) "
        "| tierlog/Kafka rec/s |",
        "|---|---|---|---|---|---|",
    ]
    for partitions, figures in results.items():
        rates = {name: statistics.median(r for r, _ in runs) for name, runs in figures.items()}
        for name, runs in figures.items():
            tasks = statistics.median(t for _, t in runs)
            mib = rates[name] * RECORD_BYTES / MIB
            ratio = f"{rates[TIERLOG] / rates[KAFKA]:.2f}" if name == TIERLOG else ""
            rate = f"{rates[name]:,.0f}"
            lines.append(f"| {partitions:,} | {name} | {rate} | {mib:.1f} | {tasks:g} | {ratio} |")
    return "\n".join(lines)


@contextlib.contextmanager
def _systems(scratch: Path) -> Iterator[list[Side]]:
    tools = KafkaTools.locate()
    with (
        KafkaBroker(tools, scratch / "kafka") as broker,
        sidecar(scratch / "tierlog" / "data") as (address, _),
    ):
        progress(f"Kafka {tools.version} at {broker.bootstrap_server}, tierlog at {address}")
        yield [KafkaSide(tools, broker), TierlogSide(address)]


def run(args: argparse.Namespace, scratch: Path) -> None:
    print(machine_line(), flush=True)
    started = time.monotonic()
    with _systems(scratch) as sides:
        results = {n: measure(sides, n, args.records, args.runs) for n in args.partitions}
    print(
        f"{args.runs} runs per N, {args.records:,} records of {RECORD_BYTES} B; "
        f"{time.monotonic() - started:.0f} s in all; "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    )
    for partitions, figures in results.items():
        for name, runs in figures.items():
            each = ", ".join(f"{r:,.0f} rec/s {t} tasks" for r, t in runs)
            print(f"{partitions} {name}: {each}")
    print()
    print(table(results))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[10, 1000])
    parser.add_argument("--records", type=int, default=100_000, help="per topic")
    parser.add_argument("--runs", type=int, default=3, help="per N; medians reported")
    parser.add_argument("--workdir", type=Path, help="where the scratch dir goes")
    args = parser.parse_args(argv)
    run_in_scratch("tierlog-consumer-bench-", args.workdir, lambda scratch: run(args, scratch))


if __name__ == "__main__":
    main()
