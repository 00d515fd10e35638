"""Issue 31's figures: tierlog's Kafka listener beside Kafka 4.1.1 and beside its own gRPC path.

Run from the repository root (needs the Kafka jars in ``.cache``; ~40 minutes on 2 busy vCPUs)::

    .venv/bin/python -m tests.benchmarks.kafka_listener_bench

For each replication factor N of ``--replication-factors`` (1 and 3), two clusters of N
brokers on loopback, up for that factor's part of the run, make three systems:

- **A**, tierlog's Kafka listener: ``tierlog cluster up --brokers N`` (every broker with a
  Kafka listener, topics of N replicas), driven by Kafka's own ``ProducerPerformance`` and
  ``ConsumerPerformance`` (kafka-tools 4.1.1) through ``cluster status --kafka-bootstrap``;
- **B**, Kafka: the interop harness's KRaft ``KafkaCluster`` of N brokers, broker 0 the
  controller too (``tests/interop/kafka.py``; N JVMs), driven by the same two tools;
- **C**, tierlog's gRPC path: the same brokers as A, driven by ``tierlog perf``.

The workload is ``kafka_comparison_bench``'s (its ``measure``: peak produce, consume of what
was produced, produce at half of Kafka's median peak), with ``acks=all``: 1 KiB records, one
partition of N replicas (``min.insync.replicas`` at its default, 1, on both: with acks=all a
leader waits for every in-sync replica whatever it says), no compression, ``batch.size``
64 KiB and 1 MiB, ``linger.ms=1000``. Every figure is taken ``--runs`` times with the systems
interleaved, the order turning by one each round (A, B, C, then B, C, A, then C, A, B:
``kafka_comparison_bench.in_turn``), and medians are reported. Consumers join with
``group.protocol=consumer`` (KIP-848) on both; ``fetch.*`` figures leave the join out.

During each run of one system the other cluster is sidelined (``side_by_side.sidelined``:
its processes at the lowest CPU priority, still running, so that its idle work takes no CPU
the measured one wants); ``--rivals-compete`` leaves it at its normal priority. Its CPU
seconds during each peak produce and consume are reported.

Around every peak produce and every consume the brokers' CPU time (``utime + stime`` from
``/proc/PID/stat``, all their threads) and their threads' run-queue wait (``task/*/schedstat``)
are read, summed over the cluster's processes and reported per MiB moved: the sidecars' for
A and C, the JVMs' for B (so with N = 3 they include the followers' replication). A and C
share the sidecars, so their CPU per MiB compares the two front doors directly; the run-queue
wait says how long the brokers were ready to work but the machine gave them no CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.benchmarks.kafka_comparison_bench import (
    BATCH_SIZES,
    MIB,
    RATE_REACHED,
    RECORD_BYTES,
    BatchSizeFigures,
    Consumed,
    Kafka,
    KafkaEndpoint,
    Produced,
    System,
    Tierlog,
    machine,
    measure,
    mib_per_s,
    progress,
)
from tests.benchmarks.side_by_side import Usage, clusters, sidelined_unless, usage
from tests.interop.kafka import KafkaTools
from tierlog.tools.progress import Advance, choose_tracker

LISTENER, KAFKA, GRPC = "tierlog Kafka listener", "Kafka", "tierlog gRPC"
SYSTEMS = (LISTENER, KAFKA, GRPC)


@dataclass
class Metered:
    """A system whose brokers' ``usage`` is read around each peak produce and each consume.

    Its topics, made by ``topics``, carry ``prefix``: the listener and gRPC share one cluster,
    and ``measure`` gives every system the same topic names. Unless ``rivals_compete``, the
    other cluster's processes, ``rivals``, are ``sidelined`` during each of its runs; their
    CPU seconds during its throughput runs are kept in ``rival_cpu_s``."""

    system: System
    topics: KafkaEndpoint
    pids: Sequence[int]
    rivals: Sequence[int]
    prefix: str
    advance: Advance
    rivals_compete: bool = False
    produce_per_mib: list[Usage] = field(default_factory=list)
    consume_per_mib: list[Usage] = field(default_factory=list)
    rival_cpu_s: list[float] = field(default_factory=list)
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.system.name

    def clear(self) -> None:
        self.produce_per_mib.clear()
        self.consume_per_mib.clear()
        self.rival_cpu_s.clear()

    def create_topic(self, topic: str) -> None:
        self.topics.create_topic(f"{self.prefix}-{topic}")

    def _sidelining(self) -> contextlib.AbstractContextManager[None]:
        return sidelined_unless(self.rivals_compete, self.rivals)

    def produce(self, topic: str, records: int, batch_bytes: int, rate: float) -> Produced:
        with self._sidelining():
            before, rivals_before = usage(self.pids), usage(self.rivals)
            produced = self.system.produce(f"{self.prefix}-{topic}", records, batch_bytes, rate)
            if rate < 0:  # the peak runs: the rate-limited ones idle between batches
                self.produce_per_mib.append(
                    usage(self.pids).since(before).per_mib(produced.records)
                )
                self.rival_cpu_s.append(usage(self.rivals).since(rivals_before).cpu_s)
        self.advance(1)
        return produced

    def consume(self, topic: str, records: int) -> Consumed:
        with self._sidelining():
            before, rivals_before = usage(self.pids), usage(self.rivals)
            consumed = self.system.consume(f"{self.prefix}-{topic}", records)
            self.consume_per_mib.append(usage(self.pids).since(before).per_mib(consumed.records))
            self.rival_cpu_s.append(usage(self.rivals).since(rivals_before).cpu_s)
        self.advance(1)
        return consumed


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}" if base > 0 else "n/a"


def _verdict(ratio: float, target: float, at_least: bool) -> str:
    met = ratio >= target if at_least else ratio <= target
    return f"{'≥' if at_least else '≤'} {target}x {'✔' if met else '✘'}"


def _rate(records_per_s: float) -> str:
    return f"{records_per_s:,.0f} rec/s ({mib_per_s(records_per_s) * MIB / 1e6:.1f} MB/s)"


@dataclass(frozen=True)
class Figures:
    """One replication factor's and batch size's medians by system name."""

    replication_factor: int
    label: str
    peak: dict[str, float]
    consume: dict[str, float]
    latency_rate: float
    p99: dict[str, float]
    p50: dict[str, float]
    achieved: dict[str, float]
    produce_usage: dict[str, Usage]  # per MiB
    consume_usage: dict[str, Usage]
    runs: dict[str, list[str]]  # every run's figures, for the record


def summarise(
    replication_factor: int, measured: BatchSizeFigures, metered: Sequence[Metered]
) -> Figures:
    """The medians of ``kafka_comparison_bench.measure``'s figures and of the CPU readings."""
    med = statistics.median
    peak, consume, latency = measured.peak, measured.consume, measured.latency
    runs = {
        name: [
            "peak " + ", ".join(f"{p.records_per_s / 1000:.1f} k" for p in peak[name]),
            "consume " + ", ".join(f"{c.records_per_s / 1000:.1f} k" for c in consume[name]),
            "p99 " + ", ".join(f"{p.p99_ms:g} ms" for p in latency[name]),
        ]
        for name in SYSTEMS
    }
    for m in metered:  # peak produces, then consumes
        runs[m.name].append(
            "the other cluster's CPU meanwhile "
            + ", ".join(f"{seconds:.2f} s" for seconds in m.rival_cpu_s)
        )
    return Figures(
        replication_factor=replication_factor,
        label=measured.label,
        peak={name: med(p.records_per_s for p in peak[name]) for name in SYSTEMS},
        consume={name: med(c.records_per_s for c in consume[name]) for name in SYSTEMS},
        latency_rate=measured.latency_rate,
        p99={name: med(p.p99_ms for p in latency[name]) for name in SYSTEMS},
        p50={name: med(p.p50_ms for p in latency[name]) for name in SYSTEMS},
        achieved={name: med(p.records_per_s for p in latency[name]) for name in SYSTEMS},
        produce_usage={m.name: _median_usage(m.produce_per_mib) for m in metered},
        consume_usage={m.name: _median_usage(m.consume_per_mib) for m in metered},
        runs=runs,
    )


def _median_usage(readings: Sequence[Usage]) -> Usage:
    return Usage(
        statistics.median(u.cpu_s for u in readings),
        statistics.median(u.run_queue_s for u in readings),
    )


def table(figures: Sequence[Figures]) -> str:
    rows = [
        f"| RF, batch | figure (median) | {LISTENER} (A) | {KAFKA} (B) | {GRPC} (C) "
        "| A/B | target | A/C |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        where = f"RF {f.replication_factor}, {f.label}"
        for what, values in (("produce, peak", f.peak), ("consume", f.consume)):
            a, b, c = (values[name] for name in SYSTEMS)
            rows.append(
                f"| {where} | {what} | {_rate(a)} | {_rate(b)} | {_rate(c)} | {_ratio(a, b)} "
                f"| {_verdict(a / b, 1.0, at_least=True)} | {_ratio(a, c)} |"
            )
        a, b, c = (f.p99[name] for name in SYSTEMS)
        verdict = _verdict(a / b if b > 0 else float("inf"), 1.5, at_least=False)
        if f.achieved[LISTENER] < RATE_REACHED * f.latency_rate:
            verdict = "≤ 1.5x ✘ (rate not reached)"
        p50 = [f.p50[name] for name in SYSTEMS]
        rows.append(
            f"| {where} | produce at {f.latency_rate:,.0f} rec/s (½ Kafka's peak): p99 (p50) "
            f"| {a:g} ms ({p50[0]:g}) | {b:g} ms ({p50[1]:g}) | {c:g} ms ({p50[2]:g}) "
            f"| {_ratio(a, b)} | {verdict} | {_ratio(a, c)} |"
        )
        a, b, c = (f.achieved[name] for name in SYSTEMS)
        rows.append(
            f"| {where} | rate achieved in those runs | {_rate(a)} | {_rate(b)} | {_rate(c)} "
            f"| {_ratio(a, b)} | | {_ratio(a, c)} |"
        )
        for what, per_mib in (("produce", f.produce_usage), ("consume", f.consume_usage)):
            for figure, index in (("CPU", 0), ("run-queue wait", 1)):
                a, b, c = (per_mib[name][index] for name in SYSTEMS)
                rows.append(
                    f"| {where} | brokers' {figure} s per MiB, {what} (sidecars; Kafka's JVMs) "
                    f"| {a:.3f} | {b:.3f} | {c:.3f} | {_ratio(a, b)} | | {_ratio(a, c)} |"
                )
    return "\n".join(rows)


def sampling_load(step: Advance, loads: list[float]) -> Advance:
    """``step``, noting the 1-minute load average at each run's end in ``loads``."""

    def advance_and_sample(n: int) -> None:
        loads.append(os.getloadavg()[0])
        step(n)

    return advance_and_sample


def measure_replicated(
    tools: KafkaTools,
    workdir: Path,
    replication_factor: int,
    advance: Advance,
    args: argparse.Namespace,
) -> list[Figures]:
    """Every batch size's figures on two fresh clusters of ``replication_factor`` brokers."""
    consumer_config = workdir / "consumer.properties"
    workdir.mkdir(parents=True, exist_ok=True)
    consumer_config.write_text("group.protocol=consumer\n")
    with clusters(tools, workdir, replication_factor) as (kafka, tierlog):
        progress(
            f"RF {replication_factor}: Kafka {tools.version} at {kafka.bootstrap_server}; "
            f"tierlog (pids {tierlog.pids}): Kafka listeners at {tierlog.bootstrap_server}, "
            f"gRPC at {tierlog.servers}"
        )
        tierlog_pids = list(tierlog.pids)
        kafka_pids = [node.pid for node in kafka.nodes]

        def metered_system(system: System, topics: KafkaEndpoint, prefix: str) -> Metered:
            pids, rivals = (
                (kafka_pids, tierlog_pids) if system.name == KAFKA else (tierlog_pids, kafka_pids)
            )
            return Metered(system, topics, pids, rivals, prefix, advance, args.rivals_compete)

        metered = [
            metered_system(Kafka(tools, tierlog, LISTENER, "all", consumer_config), tierlog, "a"),
            metered_system(Kafka(tools, kafka, KAFKA, "all", consumer_config), kafka, "b"),
            metered_system(Tierlog(tierlog.servers, GRPC, "all"), tierlog, "c"),
        ]
        for system in metered:  # the JVMs' JIT and the sidecars' first segments
            system.create_topic("warm-up")
            system.produce("warm-up", args.warm_up_records, 64 * 1024, -1)
            system.consume("warm-up", args.warm_up_records)
            system.clear()
            progress(f"RF {replication_factor}: {system.name} warmed up (not counted)")
        figures = []
        for label in args.batch_sizes:
            batch_bytes = BATCH_SIZES[label]
            measured = measure(label, batch_bytes, metered, None, args)
            figures.append(summarise(replication_factor, measured, metered))
            for system in metered:
                system.clear()
    return figures


def run(args: argparse.Namespace) -> None:
    tools = KafkaTools.locate()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tierlog-kafka-listener-bench-"))
    batch_sizes = len(args.batch_sizes)
    # per factor, batch size and round, each system: a peak produce, a consume, a latency
    # produce; per factor, each system's warm-up produce and consume
    per_factor = batch_sizes * args.runs * len(SYSTEMS) * 3 + len(SYSTEMS) * 2
    loads: dict[int, list[float]] = {factor: [] for factor in args.replication_factors}
    seconds: dict[int, float] = {}
    figures: list[Figures] = []
    started = time.monotonic()
    try:
        tracker = choose_tracker(args.progress)
        with tracker("runs", per_factor * len(loads), "run") as advance:
            for factor, factor_loads in loads.items():
                factor_started = time.monotonic()
                sampled = sampling_load(advance, factor_loads)
                figures += measure_replicated(tools, workdir / f"rf{factor}", factor, sampled, args)
                seconds[factor] = time.monotonic() - factor_started
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"Machine: {machine()}; Kafka {tools.version}.")
    print(
        f"{args.runs} rounds (A, B, C interleaved, the order turning each round), "
        f"{args.records:,} records of {RECORD_BYTES} B "
        f"per throughput run, {args.latency_seconds:g} s of records per latency run, acks=all; "
        f"{time.monotonic() - started:.0f} s in all."
    )
    for factor, factor_loads in loads.items():
        print(
            f"- RF {factor} ({factor} brokers each): {seconds[factor]:.0f} s, 1-minute load "
            f"average {min(factor_loads):.1f}-{max(factor_loads):.1f} "
            f"(median {statistics.median(factor_loads):.1f})."
        )
    print()
    print(table(figures))
    print()
    for f in figures:
        for name, runs in f.runs.items():
            print(f"- RF {f.replication_factor}, {f.label} {name}: {'; '.join(runs)}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="rounds; medians reported")
    parser.add_argument("--records", type=int, default=200_000, help="per throughput run")
    parser.add_argument("--warm-up-records", type=int, default=100_000, help="before measuring")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="per latency run")
    parser.add_argument(
        "--replication-factors",
        type=int,
        nargs="+",
        default=[1, 3],
        metavar="N",
        help="each on two fresh clusters of N brokers, one after the other",
    )
    parser.add_argument(
        "--batch-sizes",
        nargs="+",
        choices=list(BATCH_SIZES),
        default=list(BATCH_SIZES),
        metavar="SIZE",
        help=f"batch sizes measured, of {', '.join(map(repr, BATCH_SIZES))}",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a check that every piece works: the first batch size only, 1 round of 20,000 "
        "records per factor",
    )
    parser.add_argument(
        "--rivals-compete",
        action="store_true",
        help="leave the cluster not being measured at its normal CPU priority (by default it "
        "is sidelined during each run: side_by_side.sidelined)",
    )
    parser.add_argument("--progress", action="store_true", help="draw a bar even off a terminal")
    parser.add_argument("--workdir", help="keep the data here (default: a temporary dir)")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.records, args.warm_up_records, args.latency_seconds = 1, 20_000, 5_000, 2
        args.batch_sizes = args.batch_sizes[:1]
    run(args)


if __name__ == "__main__":
    main()
