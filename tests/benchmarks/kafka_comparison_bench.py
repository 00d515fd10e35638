"""Issue 4's speed figures: tierlog's gRPC sidecar beside a real single-node Kafka, one run.

Run from the repository root (needs ``make tools``; ~8 minutes on 2 vCPUs)::

    .venv/bin/python -m tests.benchmarks.kafka_comparison_bench

It starts the interop harness's KRaft broker (``tests/interop/kafka.py``) and a
``tierlog-sidecar`` on loopback, each on its own data directory, both up for the
whole run, warms each up with one unmeasured produce and consume, then for each
batch size (64 KiB and 1 MiB) of 1 KiB records, every client in its own process:

- produce throughput: Kafka's ``ProducerPerformance`` (``kafka-producer-perf-test``)
  against ``tierlog perf produce``, same records, ``batch.size``, ``acks=1``
  (acknowledged once in the page cache: neither side fsyncs per batch) and
  ``linger.ms=1000`` so that batches leave full, as the batch size says, rather
  than when a short linger runs out; one partition, no compression, ``--throughput -1``;
- consume throughput: Kafka's ``ConsumerPerformance`` (its ``fetch.*`` figures, which
  leave out joining the group) against ``tierlog perf consume``, each reading back a
  topic the produce run wrote, both with a 1 MiB ``max.partition.fetch.bytes``;
- produce latency, p50 and p99 from send to acknowledgement, at half of Kafka's
  median peak records/s for that batch size (``--throughput``), both sides; with
  full batches, both include the time a batch takes to fill at that rate;
- the loopback gRPC ceiling: a trivial ``grpc.aio`` server and client (this module
  run with ``--loopback-server`` / ``--loopback-client``) moving the same bytes in
  messages of the batch size, no storage and no protobuf: one bidirectional stream
  with up to 5 messages unanswered (the producer's ``max.in.flight``), each answered
  with 8 bytes; and one server stream of batches (the fetch direction).

Each figure is run ``--runs`` times, the systems interleaved in an order that turns by
one from round to round (``in_turn``), and the median is reported, in a Markdown table
with the ratios tierlog/Kafka and issue 4's targets (throughput >= 1.0x Kafka's, p99
<= 1.5x Kafka's). MiB/s is records/s x 1 KiB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import grpc

from tests.interop.kafka import KafkaBroker, KafkaTools
from tierlog.client import AdminClient

REPO = Path(__file__).resolve().parents[2]
MODULE = "tests.benchmarks.kafka_comparison_bench"  # run with -m from REPO
TIERLOG_BIN = Path(sys.executable).parent
RECORD_BYTES = 1024
MIB = 1024 * 1024
BATCH_SIZES = {"64 KiB": 64 * 1024, "1 MiB": MIB}
# A p99 counts only if the run held the asked rate; below it the producer fell behind, and
# its p99 says nothing about latency at that load.
RATE_REACHED = 0.95
LINGER_MS = 1000  # batches leave when full (see the module docstring)
IN_FLIGHT = 5
# What Kafka's own scripts give the perf tools: kafka-producer-perf-test.sh's heap,
# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS.
PERF_TOOL_JVM_ARGS = (
    "-Xmx512m",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
LOOPBACK_SERVICE = "tierlog.bench.Loopback"
LISTENING = re.compile(r"listening on (\S+)")
# Kafka's ProducerPerformance and ``tierlog perf produce`` print the same summary line.
PRODUCE_SUMMARY = re.compile(
    r"(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec \([\d.]+ MB/sec\), "
    r"[\d.]+ ms avg latency, [\d.]+ ms max latency, (?P<p50>[\d.]+) ms 50th, "
    r"[\d.]+ ms 95th, (?P<p99>[\d.]+) ms 99th"
)


# --- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Produced:
    records: int
    records_per_s: float
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class Consumed:
    records: int
    records_per_s: float


def mib_per_s(records_per_s: float) -> float:
    return records_per_s * RECORD_BYTES / MIB


def parse_produce(output: str) -> Produced:
    summaries = list(PRODUCE_SUMMARY.finditer(output))
    if not summaries:
        raise RuntimeError(f"no produce summary in:\n{output[-2000:]}")
    last = summaries[-1]
    return Produced(
        int(last["records"]), float(last["rate"]), float(last["p50"]), float(last["p99"])
    )


def parse_consume(output: str) -> Consumed:
    """ConsumerPerformance's CSV (which ``tierlog perf consume`` prints too): a header
    line, then one line of figures."""
    lines = [line for line in output.splitlines() if line.strip()]
    header_at = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
    names = [name.strip() for name in lines[header_at].split(",")]
    values = dict(zip(names, (v.strip() for v in lines[header_at + 1].split(",")), strict=True))
    return Consumed(int(values["data.consumed.in.nMsg"]), float(values["fetch.nMsg.sec"]))


def run_client(command: Sequence[str | Path], timeout_s: float = 300) -> str:
    """One client process to completion; its stdout, or an error with its output."""
    done = subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"exit {done.returncode}: {' '.join(done.args)}\n{done.stdout[-2000:]}"
            f"{done.stderr[-2000:]}"
        )
    return done.stdout


# --- the two systems ------------------------------------------------------------------------


class System(Protocol):
    name: str

    def create_topic(self, topic: str) -> None: ...

    def produce(self, topic: str, records: int, batch_bytes: int, rate: float) -> Produced: ...

    def consume(self, topic: str, records: int) -> Consumed: ...


class KafkaEndpoint(Protocol):
    """Where Kafka's clients connect: one broker (``KafkaBroker``) or a ``KafkaCluster``."""

    @property
    def bootstrap_server(self) -> str: ...

    def create_topic(self, topic: str) -> None: ...


@dataclass
class Kafka:
    """Kafka's broker from the interop harness, driven by Kafka's own perf tools."""

    tools: KafkaTools
    broker: KafkaEndpoint
    name: str = "Kafka"
    acks: str = "1"
    consumer_config: Path | None = None  # ConsumerPerformance's --consumer.config

    def create_topic(self, topic: str) -> None:
        self.broker.create_topic(topic)

    def produce(self, topic: str, records: int, batch_bytes: int, rate: float) -> Produced:
        command = self.tools.command(
            "org.apache.kafka.tools.ProducerPerformance",
            *("--topic", topic, "--num-records", str(records)),
            *("--record-size", str(RECORD_BYTES), "--throughput", str(rate)),
            "--producer-props",
            f"bootstrap.servers={self.broker.bootstrap_server}",
            f"acks={self.acks}",
            f"batch.size={batch_bytes}",
            f"linger.ms={LINGER_MS}",
            jvm_args=PERF_TOOL_JVM_ARGS,
        )
        return parse_produce(run_client(command))

    def consume(self, topic: str, records: int) -> Consumed:
        command = self.tools.command(
            "org.apache.kafka.tools.ConsumerPerformance",
            *("--bootstrap-server", self.broker.bootstrap_server, "--topic", topic),
            *("--messages", str(records), "--fetch-size", str(MIB), "--timeout", "60000"),
            *(() if self.consumer_config is None else ("--consumer.config", self.consumer_config)),
            jvm_args=PERF_TOOL_JVM_ARGS,
        )
        return parse_consume(run_client(command))


@dataclass
class Tierlog:
    """A ``tierlog-sidecar``, driven by ``tierlog perf``."""

    address: str
    name: str = "tierlog"
    acks: str = "1"

    def create_topic(self, topic: str) -> None:
        with AdminClient(self.address) as admin:
            admin.create_topic(topic)

    def produce(self, topic: str, records: int, batch_bytes: int, rate: float) -> Produced:
        props = (f"acks={self.acks}", f"batch.size={batch_bytes}", f"linger.ms={LINGER_MS}")
        command: list[str | Path] = [
            TIERLOG_BIN / "tierlog",
            *("perf", "produce", topic, "--server", self.address),
            *("--num-records", str(records), "--record-size", str(RECORD_BYTES)),
            *("--throughput", str(rate)),
            *(arg for prop in props for arg in ("--producer-props", prop)),
        ]
        return parse_produce(run_client(command))

    def consume(self, topic: str, records: int) -> Consumed:
        command: list[str | Path] = [
            TIERLOG_BIN / "tierlog",
            *("perf", "consume", topic, "--server", self.address),
            *("--num-records", str(records), "--consumer-property"),
            f"max.partition.fetch.bytes={MIB}",
        ]
        return parse_consume(run_client(command))


@contextlib.contextmanager
def sidecar(
    data_dir: Path,
    start_timeout_s: float = 30,
    *,
    name: str = "sidecar",
    pythonpath: str | None = None,
    extra_args: Sequence[str] = (),
) -> Iterator[tuple[str, int]]:
    """A ``tierlog-sidecar`` on a free loopback port, its output in ``<name>.log`` beside
    ``data_dir`` (its code from ``pythonpath`` if given, ``extra_args`` after its own);
    its address and pid while it runs."""
    data_dir.mkdir(parents=True)
    env = None if pythonpath is None else {**os.environ, "PYTHONPATH": pythonpath}
    log_path = data_dir.parent / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                *(TIERLOG_BIN / "tierlog-sidecar", "--data-dir", data_dir),
                *("--listen", "127.0.0.1:0", *extra_args),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    try:
        yield wait_for_listening(process, log_path, start_timeout_s), process.pid
    finally:
        process.terminate()
        process.wait(timeout=60)


def wait_for_listening(process: subprocess.Popen[bytes], log_path: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = LISTENING.search(log_path.read_text(errors="replace"))
        if match:
            return match[1]
        if process.poll() is not None:
            raise RuntimeError(
                f"{process.args!r} exited {process.returncode}:\n{log_path.read_text()}"
            )
        time.sleep(0.1)
    raise TimeoutError(f"no 'listening on' from {process.args!r} within {timeout_s} s")


# --- the loopback gRPC ceiling --------------------------------------------------------------


async def _answer_each(requests: AsyncIterator[bytes], context: object) -> AsyncIterator[bytes]:
    async for request in requests:
        yield len(request).to_bytes(8, "big")


async def _stream_batches(request: bytes, context: object) -> AsyncIterator[bytes]:
    batch_bytes, count = int.from_bytes(request[:8], "big"), int.from_bytes(request[8:], "big")
    batch = os.urandom(batch_bytes)
    for _ in range(count):
        yield batch


async def serve_loopback() -> None:
    """The ceiling's server: raw bytes both ways, nothing stored."""
    options = [
        ("grpc.max_receive_message_length", 2 * MIB),
        ("grpc.max_send_message_length", 2 * MIB),
    ]
    server = grpc.aio.server(options=options)
    handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
        "Produce": grpc.stream_stream_rpc_method_handler(_answer_each),
        "Fetch": grpc.unary_stream_rpc_method_handler(_stream_batches),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(LOOPBACK_SERVICE, handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


async def loopback_produce(address: str, batch_bytes: int, count: int) -> float:
    """Seconds to send ``count`` batches on one stream, at most IN_FLIGHT unanswered."""
    options = [
        ("grpc.max_receive_message_length", 2 * MIB),
        ("grpc.max_send_message_length", 2 * MIB),
    ]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        produce: grpc.aio.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(
            f"/{LOOPBACK_SERVICE}/Produce"
        )
        call = produce()
        window = asyncio.Semaphore(IN_FLIGHT)
        batch = os.urandom(batch_bytes)

        async def read_answers() -> None:
            async for _answer in call:
                window.release()

        started = time.perf_counter()
        reader = asyncio.create_task(read_answers())
        for _ in range(count):
            await window.acquire()
            await call.write(batch)
        await call.done_writing()
        await reader
        return time.perf_counter() - started


async def loopback_fetch(address: str, batch_bytes: int, count: int) -> float:
    """Seconds to receive ``count`` batches on one server stream."""
    options = [("grpc.max_receive_message_length", 2 * MIB)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        request = batch_bytes.to_bytes(8, "big") + count.to_bytes(8, "big")
        started = time.perf_counter()
        received = 0
        fetch: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(
            f"/{LOOPBACK_SERVICE}/Fetch"
        )
        async for batch in fetch(request):
            received += len(batch)
        if received != batch_bytes * count:
            raise RuntimeError(f"fetched {received} bytes of {batch_bytes * count}")
        return time.perf_counter() - started


def loopback_client(direction: str, address: str, batch_bytes: int, count: int) -> None:
    run = loopback_produce if direction == "produce" else loopback_fetch
    elapsed_s = asyncio.run(run(address, batch_bytes, count))
    print(f"{batch_bytes * count / MIB / elapsed_s:.1f} MiB/s")


@contextlib.contextmanager
def loopback_server(workdir: Path) -> Iterator[str]:
    log_path = workdir / "loopback.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", MODULE, "--loopback-server"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
        )
    try:
        yield wait_for_listening(process, log_path, 30)
    finally:
        process.terminate()
        process.wait(timeout=30)


def loopback_mib_per_s(direction: str, address: str, batch_bytes: int, total_bytes: int) -> float:
    count = max(1, total_bytes // batch_bytes)
    output = run_client(
        [
            sys.executable,
            *("-m", MODULE, "--loopback-client", direction, address),
            *("--batch-bytes", str(batch_bytes), "--count", str(count)),
        ]
    )
    return float(output.split()[0])


# --- the run --------------------------------------------------------------------------------


@dataclass
class BatchSizeFigures:
    """Every run's figures for one batch size, by system name."""

    label: str
    peak: dict[str, list[Produced]]
    consume: dict[str, list[Consumed]]
    latency_rate: float  # records/s: half of Kafka's median peak
    latency: dict[str, list[Produced]]
    loopback_produce_mib_s: list[float]
    loopback_fetch_mib_s: list[float]


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


SystemT = TypeVar("SystemT")


def in_turn(systems: Sequence[SystemT], run: int) -> list[SystemT]:
    """``systems`` in the order of round ``run``: the first of round 0 goes last in round 1,
    and so on, so that no system keeps one place. With a fixed order (three runs of
    ``kafka_listener_bench`` on 2026-12-02, 1,000,000 records a round) the system always
    first in its round was the slowest consumer of the three in 8 of 9 rounds, and in 7
    the rates rose from the round's first to its last: a place in the order and the
    system in it could not be told apart."""
    turn = run % len(systems) if systems else 0
    return [*systems[turn:], *systems[:turn]]


def measure(
    label: str,
    batch_bytes: int,
    systems: Sequence[System],
    loopback_address: str | None,
    args: argparse.Namespace,
) -> BatchSizeFigures:
    """Each figure ``args.runs`` times, the systems interleaved in every round, each round
    starting with the next of them (``in_turn``); the loopback ceiling too unless
    ``loopback_address`` is None."""
    tag = label.replace(" ", "").lower()
    peak: dict[str, list[Produced]] = {system.name: [] for system in systems}
    consume: dict[str, list[Consumed]] = {system.name: [] for system in systems}
    latency: dict[str, list[Produced]] = {system.name: [] for system in systems}
    for run in range(args.runs):
        for system in in_turn(systems, run):
            topic = f"peak-{tag}-{run}"
            system.create_topic(topic)
            produced = system.produce(topic, args.records, batch_bytes, -1)
            if produced.records != args.records:
                raise RuntimeError(f"{system.name} acknowledged {produced.records} records")
            peak[system.name].append(produced)
            progress(f"{label} {system.name} produce #{run + 1}: {produced}")
    for run in range(args.runs):
        for system in in_turn(systems, run):
            consumed = system.consume(f"peak-{tag}-{run}", args.records)
            if consumed.records < args.records:
                raise RuntimeError(f"{system.name} consumed {consumed.records} records")
            consume[system.name].append(consumed)
            progress(f"{label} {system.name} consume #{run + 1}: {consumed}")
    rate = round(statistics.median(p.records_per_s for p in peak["Kafka"]) / 2)
    records = int(rate * args.latency_seconds)
    for run in range(args.runs):
        for system in in_turn(systems, run):
            topic = f"latency-{tag}-{run}"
            system.create_topic(topic)
            produced = system.produce(topic, records, batch_bytes, rate)
            latency[system.name].append(produced)
            progress(f"{label} {system.name} produce at {rate}/s #{run + 1}: {produced}")
    if loopback_address is None:
        return BatchSizeFigures(label, peak, consume, rate, latency, [], [])
    total_bytes = args.records * RECORD_BYTES
    loopback_produce = [
        loopback_mib_per_s("produce", loopback_address, batch_bytes, total_bytes)
        for _ in range(args.runs)
    ]
    loopback_fetch = [
        loopback_mib_per_s("fetch", loopback_address, batch_bytes, total_bytes)
        for _ in range(args.runs)
    ]
    progress(f"{label} loopback gRPC: produce {loopback_produce}, fetch {loopback_fetch} MiB/s")
    return BatchSizeFigures(label, peak, consume, rate, latency, loopback_produce, loopback_fetch)


def warm_up(systems: Sequence[System], records: int) -> None:
    """One unmeasured produce and consume on each server first: the broker's JIT compiles
    its hot paths in the first seconds, and the first run would pay for it."""
    for system in systems:
        system.create_topic("warm-up")
        produced = system.produce("warm-up", records, 64 * 1024, -1)
        consumed = system.consume("warm-up", records)
        progress(f"{system.name} warm-up (not counted): {produced}, {consumed}")


def _verdict(ratio: float, target: float, at_least: bool) -> str:
    met = ratio >= target if at_least else ratio <= target
    return f"{'≥' if at_least else '≤'} {target}x {'✔' if met else '✘'}"


def _rate(records_per_s: float) -> str:
    return f"{records_per_s:,.0f} rec/s ({mib_per_s(records_per_s):.1f} MiB/s)"


def table(figures: Sequence[BatchSizeFigures]) -> str:
    med = statistics.median
    rows = [
        "| batch | figure (median) | Kafka | tierlog | tierlog/Kafka | target |",
        "|---|---|---|---|---|---|",
    ]
    for f in figures:
        kafka_peak = med(p.records_per_s for p in f.peak["Kafka"])
        tierlog_peak = med(p.records_per_s for p in f.peak["tierlog"])
        ratio = tierlog_peak / kafka_peak
        rows.append(
            f"| {f.label} | produce, peak | {_rate(kafka_peak)} | {_rate(tierlog_peak)} "
            f"| {ratio:.2f} | {_verdict(ratio, 1.0, at_least=True)} |"
        )
        kafka_consume = med(c.records_per_s for c in f.consume["Kafka"])
        tierlog_consume = med(c.records_per_s for c in f.consume["tierlog"])
        ratio = tierlog_consume / kafka_consume
        rows.append(
            f"| {f.label} | consume | {_rate(kafka_consume)} | {_rate(tierlog_consume)} "
            f"| {ratio:.2f} | {_verdict(ratio, 1.0, at_least=True)} |"
        )
        kafka_p99 = med(p.p99_ms for p in f.latency["Kafka"])
        tierlog_p99 = med(p.p99_ms for p in f.latency["tierlog"])
        kafka_p50 = med(p.p50_ms for p in f.latency["Kafka"])
        tierlog_p50 = med(p.p50_ms for p in f.latency["tierlog"])
        ratio = tierlog_p99 / kafka_p99 if kafka_p99 > 0 else float("inf")
        kafka_achieved = med(p.records_per_s for p in f.latency["Kafka"])
        tierlog_achieved = med(p.records_per_s for p in f.latency["tierlog"])
        verdict = _verdict(ratio, 1.5, at_least=False)
        if tierlog_achieved < RATE_REACHED * f.latency_rate:
            verdict = "≤ 1.5x ✘ (rate not reached)"
        rows.append(
            f"| {f.label} | produce at {f.latency_rate:,.0f} rec/s (½ Kafka's peak): p99 (p50) "
            f"| {kafka_p99:.1f} ms ({kafka_p50:.1f} ms) | {tierlog_p99:.1f} ms "
            f"({tierlog_p50:.1f} ms) | {ratio:.2f} | {verdict} |"
        )
        rows.append(
            f"| {f.label} | rate achieved in that run | {_rate(kafka_achieved)} "
            f"| {_rate(tierlog_achieved)} | {tierlog_achieved / kafka_achieved:.2f} | |"
        )
        ceiling_produce = med(f.loopback_produce_mib_s)
        ceiling_fetch = med(f.loopback_fetch_mib_s)
        rows.append(
            f"| {f.label} | loopback gRPC ceiling (grpc.aio, no storage): produce / fetch "
            f"| | {ceiling_produce:.0f} / {ceiling_fetch:.0f} MiB/s "
            f"| tierlog/ceiling {mib_per_s(tierlog_peak) / ceiling_produce:.2f} / "
            f"{mib_per_s(tierlog_consume) / ceiling_fetch:.2f} | |"
        )
    return "\n".join(rows)


def machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {platform.platform()}, "
        f"CPython {platform.python_version()}, grpcio {grpc.__version__}"
    )


def run(args: argparse.Namespace) -> None:
    tools = KafkaTools.locate()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tierlog-kafka-bench-"))
    started, load_at_start = time.monotonic(), os.getloadavg()[0]
    try:
        with (
            KafkaBroker(tools, workdir / "kafka") as broker,
            sidecar(workdir / "tierlog" / "data") as (address, _),
            loopback_server(workdir) as loopback_address,
        ):
            systems: list[System] = [Kafka(tools, broker), Tierlog(address)]
            progress(f"Kafka {tools.version} at {broker.bootstrap_server}, tierlog at {address}")
            warm_up(systems, args.warm_up_records)
            figures = [
                measure(label, batch_bytes, systems, loopback_address, args)
                for label, batch_bytes in BATCH_SIZES.items()
            ]
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"Machine: {machine()}; Kafka {tools.version}.")
    print(
        f"{args.runs} runs of each figure, {args.records:,} records of {RECORD_BYTES} B per "
        f"throughput run, {args.latency_seconds:g} s of records per latency run; "
        f"{time.monotonic() - started:.0f} s in all; 1-minute load average {load_at_start:.1f} "
        f"before the run, {os.getloadavg()[0]:.1f} at its end (the run itself: up to ~2)."
    )
    print()
    print(table(figures))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="of each figure; medians reported")
    parser.add_argument("--records", type=int, default=300_000, help="per throughput run")
    parser.add_argument("--warm-up-records", type=int, default=100_000, help="before measuring")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="per latency run")
    parser.add_argument("--workdir", help="keep the data here (default: a temporary dir)")
    parser.add_argument("--loopback-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--loopback-client", nargs=2, metavar=("DIRECTION", "ADDRESS"), help=argparse.SUPPRESS
    )
    parser.add_argument("--batch-bytes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.loopback_server:
        asyncio.run(serve_loopback())
    elif args.loopback_client:
        direction, address = args.loopback_client
        loopback_client(direction, address, args.batch_bytes, args.count)
    else:
        run(args)


if __name__ == "__main__":
    main()
