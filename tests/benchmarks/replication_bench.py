"""Issue 18's figures: three replicating tierlog brokers beside a three-broker Kafka, one run.

Run from the repository root (needs ``make tools``)::

    .venv/bin/python -m tests.benchmarks.replication_bench

Kafka is the interop harness's ``KafkaCluster`` (one KRaft controller and three brokers,
each its own JVM and dirs); tierlog is three ``tierlog-sidecar`` brokers replicating over
one partition-state store directory (``tierlog.replication.state.dir``), as ``tierlog
cluster up`` starts them (each holding a lease, the controller's decisions taken by the
lowest broker id alive), everything on 127.0.0.1. Every client runs in its own process:
Kafka's own ``ProducerPerformance`` and ``VerifiableProducer`` against ``tierlog perf
produce`` and this module's ``--probe``.
For 64 KiB and 1 MiB ``batch.size`` (1 KiB records, one partition, no compression,
``linger.ms=1000`` so batches leave full, as in ``kafka_comparison_bench``):

- produce throughput with ``acks=all`` on a topic of replication factor 3 and
  ``min.insync.replicas=2``, and on a topic of replication factor 1: the overhead of
  replication is the first over the second, for each system;
- p99 (and p50) produce latency, RF 3, ``acks=all``, at half of Kafka's median RF 3 peak.

Then failover, with each system's default timeouts and with tuned ones
(``broker.session.timeout.ms`` and a client ``retry.backoff.max.ms``, the same values
on both sides): a producer with ``acks=all`` sends small records at a steady rate to
an RF 3 topic; once it is acknowledged, the partition's leader is killed with SIGKILL;
the failover time is from the kill to the first acknowledgement of a record sent after
it. A record's send time is its CreateTime, read back from the partition; its
acknowledgement time is what the producer printed when the acknowledgement came (both
wall-clock milliseconds of this machine). A record sent after the kill cannot have been
answered by the dead leader, so its acknowledgement is the new leader's. The killed
broker is restarted before the next run.

Every figure is run ``--runs`` times, Kafka then tierlog, and medians are reported in
Markdown tables with the ratios tierlog/Kafka and issue 18's targets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tests.benchmarks.kafka_comparison_bench import (
    BATCH_SIZES,
    RATE_REACHED,
    RECORD_BYTES,
    Kafka,
    Produced,
    Tierlog,
    machine,
    mib_per_s,
    progress,
)
from tests.interop.kafka import KafkaCluster, KafkaTools
from tests.support.sidecars import SidecarProcess, free_port
from tierlog.cli.perf import Throttle
from tierlog.client import AdminClient, Consumer, Producer, RecordMetadata
from tierlog.partition_state.local_store import LocalStateStore

MODULE = "tests.benchmarks.replication_bench"  # run with -m from the repository root
REPO = Path(__file__).resolve().parents[2]
REPLICAS = 3
MIN_INSYNC_REPLICAS = 2
PROBE_RATE = 200  # records/s: an acknowledgement every 5 ms bounds the error of a failover
PROBE_RECORD_BYTES = 100
PROBE_START_S = 2.0  # acknowledged records before the kill
# Issue 18's tuned failover: the same lease / session on both sides, Kafka's heartbeat
# well inside it (its default ratio), and clients retrying every 100 ms at most.
TUNED_SESSION_TIMEOUT_MS = 2000
TUNED_KAFKA_BROKER = {
    "broker.session.timeout.ms": str(TUNED_SESSION_TIMEOUT_MS),
    "broker.heartbeat.interval.ms": "500",
}
TUNED_TIERLOG_BROKER = {"broker.session.timeout.ms": str(TUNED_SESSION_TIMEOUT_MS)}
TUNED_CLIENT = {"retry.backoff.max.ms": "100"}
# VerifiableProducer sets retries=0 (so idempotence off) unless its config says otherwise:
# give it back the producer's defaults, which tierlog's producer has too.
VERIFIABLE_PRODUCER_DEFAULTS = {"retries": str(2**31 - 1), "enable.idempotence": "true"}


# --- the clusters -----------------------------------------------------------------------------


class ReplicatedSystem(Protocol):
    """One of the two clusters, as the measurements drive it."""

    name: str

    def create_topic(self, topic: str, replication_factor: int) -> None: ...

    def producer(self) -> Kafka | Tierlog: ...

    def leader(self, topic: str) -> int: ...

    def kill(self, node_id: int) -> None: ...

    def restart(self, node_id: int) -> None: ...

    def probe_command(
        self, topic: str, records: int, client_props: Mapping[str, str]
    ) -> list[str]: ...

    def send_times_ms(self, topic: str, end_offset: int) -> dict[int, int]: ...


def topic_configs(replication_factor: int) -> dict[str, str]:
    """``min.insync.replicas=2`` where there are replicas to count, Kafka's default 1 else."""
    return {"min.insync.replicas": str(MIN_INSYNC_REPLICAS if replication_factor > 1 else 1)}


@dataclass
class KafkaSide:
    tools: KafkaTools
    cluster: KafkaCluster
    name: str = "Kafka"

    def create_topic(self, topic: str, replication_factor: int) -> None:
        self.cluster.create_topic(
            topic, topic_configs(replication_factor), replication_factor=replication_factor
        )

    def producer(self) -> Kafka:
        return Kafka(self.tools, self.cluster, acks="all")

    def leader(self, topic: str) -> int:
        return self.cluster.leader(topic)

    def kill(self, node_id: int) -> None:
        self.cluster.broker(node_id).kill()

    def restart(self, node_id: int) -> None:
        self.cluster.broker(node_id).start()

    def probe_command(self, topic: str, records: int, client_props: Mapping[str, str]) -> list[str]:
        """Kafka's ``VerifiableProducer``: one JSON line per acknowledgement, with the time."""
        config = self.cluster.workdir / f"probe-{topic}.properties"
        props = {**VERIFIABLE_PRODUCER_DEFAULTS, **client_props}
        config.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
        return self.tools.command(
            "org.apache.kafka.tools.VerifiableProducer",
            *("--bootstrap-server", self.cluster.bootstrap_server, "--topic", topic),
            *("--max-messages", str(records), "--throughput", str(PROBE_RATE), "--acks", "-1"),
            *("--producer.config", str(config)),
        )

    def send_times_ms(self, topic: str, end_offset: int) -> dict[int, int]:
        read = self.cluster.live_broker().consume(topic, max_records=end_offset)
        return {record.offset: record.timestamp_ms for record in read.records}


@dataclass
class TierlogCluster:
    """Three ``tierlog-sidecar`` brokers on loopback replicating over one partition-state
    store directory, with the configs ``tierlog cluster up`` gives them; started here,
    not by that command, so that one killed broker can be started again on its port."""

    workdir: Path
    broker_configs: Mapping[str, str] = field(default_factory=dict)
    broker_count: int = REPLICAS
    brokers: list[SidecarProcess] = field(init=False)

    def __post_init__(self) -> None:
        ports = [free_port() for _ in range(self.broker_count)]
        listed = ",".join(f"{node}@127.0.0.1:{port}" for node, port in enumerate(ports))
        configs = (
            f"tierlog.cluster.brokers={listed}",
            f"tierlog.replication.state.dir={self.state_dir}",
            *(f"{key}={value}" for key, value in self.broker_configs.items()),
        )
        self.brokers = [
            SidecarProcess(self.workdir / f"broker-{node}", (f"node.id={node}", *configs), port)
            for node, port in enumerate(ports)
        ]

    @property
    def state_dir(self) -> Path:
        return self.workdir / "state"

    @property
    def store(self) -> LocalStateStore:
        return LocalStateStore(self.state_dir)

    @property
    def bootstrap_server(self) -> str:
        return ",".join(broker.address for broker in self.brokers)

    def __enter__(self) -> TierlogCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            for broker in self.brokers:
                broker.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for broker in self.brokers:
            if hasattr(broker, "process") and broker.process.poll() is None:
                broker.stop()

    def create_topic(self, topic: str, replication_factor: int) -> None:
        """``tierlog topics create --replication-factor N --config ...`` through broker 0
        (the store places the replicas); back once every replica's broker holds it."""
        with AdminClient(self.brokers[0].address) as admin:
            admin.create_topic(
                topic, 1, topic_configs(replication_factor), replication_factor=replication_factor
            )
        for node in self.store.read_topic(topic)[0].replicas:
            with AdminClient(self.brokers[node].address) as admin:
                wait_until(lambda: topic in admin.list_topics(), f"broker {node} to hold {topic}")


def wait_until(condition: object, what: str, timeout_s: float = 60) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


@dataclass
class TierlogSide:
    cluster: TierlogCluster
    name: str = "tierlog"

    def create_topic(self, topic: str, replication_factor: int) -> None:
        self.cluster.create_topic(topic, replication_factor)

    def producer(self) -> Tierlog:
        return Tierlog(self.cluster.bootstrap_server, acks="all")

    def leader(self, topic: str) -> int:
        return self.cluster.store.read_topic(topic)[0].leader

    def kill(self, node_id: int) -> None:
        self.cluster.brokers[node_id].kill()

    def restart(self, node_id: int) -> None:
        self.cluster.brokers[node_id].start()

    def probe_command(self, topic: str, records: int, client_props: Mapping[str, str]) -> list[str]:
        props = [f"{key}={value}" for key, value in client_props.items()]
        return [
            sys.executable,
            *("-m", MODULE, "--probe", self.cluster.bootstrap_server, topic),
            *("--probe-records", str(records), *(arg for p in props for arg in ("--prop", p))),
        ]

    def send_times_ms(self, topic: str, end_offset: int) -> dict[int, int]:
        times: dict[int, int] = {}
        live = [b.address for b in self.cluster.brokers if b.process.poll() is None]
        with Consumer({"bootstrap.servers": ",".join(live)}) as consumer:
            consumer.subscribe(topic)
            consumer.seek_to_beginning()
            deadline = time.monotonic() + 60
            while len(times) < end_offset and time.monotonic() < deadline:
                for record in consumer.poll(1000):
                    times[record.offset] = record.timestamp
        return times


# --- the failover probe ------------------------------------------------------------------------


def run_probe(server: str, topic: str, records: int, props: Sequence[str]) -> None:
    """tierlog's ``VerifiableProducer``: ``records`` records at PROBE_RATE with acks=all,
    one JSON line per acknowledgement (offset, and the wall-clock ms it came)."""
    config: dict[str, object] = {"bootstrap.servers": server, "acks": "all"}
    for prop in props:
        key, _, value = prop.partition("=")
        config[key] = value
    lock = threading.Lock()

    def done(metadata: RecordMetadata | None, error: BaseException | None) -> None:
        now_ms = time.time() * 1000
        line = (
            {"name": "producer_send_success", "offset": metadata.offset, "timestamp": now_ms}
            if error is None and metadata is not None
            else {"name": "producer_send_error", "message": str(error), "timestamp": now_ms}
        )
        with lock:
            print(json.dumps(line), flush=True)

    payload = b"x" * PROBE_RECORD_BYTES
    with Producer(config) as producer:
        throttle = Throttle(PROBE_RATE, time.perf_counter())
        for sent in range(records):
            time.sleep(throttle.delay_s(sent, time.perf_counter()))
            producer.send(topic, payload, callback=done)


@dataclass(frozen=True)
class Failover:
    seconds: float | None  # None: no record sent after the kill was acknowledged
    leader: int  # -1: never killed (the probe was not acknowledged before)
    acknowledged: int


def acknowledgements(path: Path) -> list[tuple[int, float]]:
    """(offset, acknowledgement ms) of each success a probe printed."""
    acks = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and event.get("name") == "producer_send_success":
                acks.append((int(event["offset"]), float(event["timestamp"])))
    return acks


def failover_seconds(
    acks: Sequence[tuple[int, float]], send_times_ms: Mapping[int, int], kill_ms: float
) -> float | None:
    """From the kill to the first acknowledgement of a record sent after it."""
    after = [acked for offset, acked in acks if send_times_ms.get(offset, -1) >= kill_ms]
    return (min(after) - kill_ms) / 1000 if after else None


def measure_failover(
    system: ReplicatedSystem,
    topic: str,
    workdir: Path,
    client_props: Mapping[str, str],
    give_up_s: float,
) -> Failover:
    """One kill: the probe runs until a second of acknowledgements came after the kill
    (the first record sent after the kill is among them: they come in send order, and at
    most a few were in flight before it), or ``give_up_s``."""
    system.create_topic(topic, REPLICAS)
    records = int(PROBE_RATE * (PROBE_START_S + give_up_s))
    output = workdir / f"{system.name}-{topic}.jsonl"
    with output.open("wb") as out, output.with_suffix(".err").open("wb") as err:
        probe = subprocess.Popen(
            system.probe_command(topic, records, client_props),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
        )
    try:
        try:
            wait_until(
                lambda: len(acknowledgements(output)) >= PROBE_RATE * PROBE_START_S,
                f"{system.name}'s probe to be acknowledged",
            )
        except TimeoutError as error:  # a failure to report, not to stop the run on
            progress(f"{system.name}, {topic}: {error}")
            return Failover(None, -1, len(acknowledgements(output)))
        leader = system.leader(topic)
        kill_ms = time.time() * 1000
        system.kill(leader)

        def acknowledged_after_kill() -> bool:
            later = [acked for _, acked in acknowledgements(output) if acked > kill_ms]
            return len(later) >= PROBE_RATE

        with contextlib.suppress(TimeoutError):
            wait_until(acknowledged_after_kill, "acknowledgements after the kill", give_up_s)
    finally:
        stop_probe(probe)
    acks = acknowledgements(output)
    end_offset = max((offset for offset, _ in acks), default=-1) + 1
    system.restart(leader)  # first: a leader nobody replaced serves the read-back again
    send_times = system.send_times_ms(topic, end_offset)
    return Failover(failover_seconds(acks, send_times, kill_ms), leader, len(acks))


def stop_probe(probe: subprocess.Popen[bytes]) -> None:
    """SIGTERM (Kafka's tool closes its producer), SIGKILL if that hangs on a dead leader."""
    probe.terminate()
    try:
        probe.wait(timeout=15)
    except subprocess.TimeoutExpired:
        probe.kill()
        probe.wait()


# --- the run -----------------------------------------------------------------------------------


@dataclass
class ThroughputFigures:
    label: str
    rf3: dict[str, list[Produced]]
    rf1: dict[str, list[Produced]]
    latency_rate: float
    latency: dict[str, list[Produced]]


def measure_throughput(
    label: str, batch_bytes: int, systems: Sequence[ReplicatedSystem], args: argparse.Namespace
) -> ThroughputFigures:
    tag = label.replace(" ", "").lower()
    peaks: dict[int, dict[str, list[Produced]]] = {
        factor: {system.name: [] for system in systems} for factor in (REPLICAS, 1)
    }
    latency: dict[str, list[Produced]] = {system.name: [] for system in systems}
    for run in range(args.runs):
        for factor in (REPLICAS, 1):
            for system in systems:
                topic = f"rf{factor}-{tag}-{run}"
                system.create_topic(topic, factor)
                produced = system.producer().produce(topic, args.records, batch_bytes, -1)
                if produced.records != args.records:
                    raise RuntimeError(f"{system.name} acknowledged {produced.records} records")
                peaks[factor][system.name].append(produced)
                progress(f"{label} RF {factor} {system.name} produce #{run + 1}: {produced}")
    rate = round(statistics.median(p.records_per_s for p in peaks[REPLICAS]["Kafka"]) / 2)
    records = int(rate * args.latency_seconds)
    for run in range(args.runs):
        for system in systems:
            topic = f"latency-{tag}-{run}"
            system.create_topic(topic, REPLICAS)
            produced = system.producer().produce(topic, records, batch_bytes, rate)
            latency[system.name].append(produced)
            progress(f"{label} {system.name} produce at {rate}/s #{run + 1}: {produced}")
    return ThroughputFigures(label, peaks[REPLICAS], peaks[1], rate, latency)


@dataclass
class FailoverFigures:
    setting: str
    runs: dict[str, list[Failover]]


def measure_failovers(
    setting: str, systems: Sequence[ReplicatedSystem], workdir: Path, args: argparse.Namespace
) -> FailoverFigures:
    client_props = TUNED_CLIENT if setting == "tuned" else {}
    runs: dict[str, list[Failover]] = {system.name: [] for system in systems}
    for run in range(args.runs):
        for system in systems:
            topic = f"failover-{setting}-{run}"
            failover = measure_failover(system, topic, workdir, client_props, args.give_up_s)
            runs[system.name].append(failover)
            progress(f"failover, {setting} timeouts, {system.name} #{run + 1}: {failover}")
    return FailoverFigures(setting, runs)


@contextlib.contextmanager
def clusters(
    tools: KafkaTools, workdir: Path, setting: str
) -> Iterator[tuple[KafkaSide, TierlogSide]]:
    kafka_configs = TUNED_KAFKA_BROKER if setting == "tuned" else {}
    tierlog_configs = TUNED_TIERLOG_BROKER if setting == "tuned" else {}
    with (
        KafkaCluster(tools, workdir / "kafka", broker_configs=kafka_configs) as kafka,
        TierlogCluster(workdir / "tierlog", tierlog_configs) as tierlog,
    ):
        yield KafkaSide(tools, kafka), TierlogSide(tierlog)


# --- the tables --------------------------------------------------------------------------------


def _rate(records_per_s: float) -> str:
    return f"{records_per_s:,.0f} rec/s ({mib_per_s(records_per_s):.1f} MiB/s)"


def _verdict(met: bool) -> str:
    return "✔" if met else "✘"


def throughput_table(figures: Sequence[ThroughputFigures]) -> str:
    med = statistics.median
    rows = [
        "| batch | figure (median) | Kafka | tierlog | tierlog/Kafka | target |",
        "|---|---|---|---|---|---|",
    ]
    for f in figures:
        peak = {name: med(p.records_per_s for p in runs) for name, runs in f.rf3.items()}
        single = {name: med(p.records_per_s for p in runs) for name, runs in f.rf1.items()}
        ratio = peak["tierlog"] / peak["Kafka"]
        rows.append(
            f"| {f.label} | produce, RF 3, acks=all, min.insync.replicas=2 | "
            f"{_rate(peak['Kafka'])} | {_rate(peak['tierlog'])} | {ratio:.2f} | "
            f"≥ 1.0x {_verdict(ratio >= 1.0)} |"
        )
        ratio = single["tierlog"] / single["Kafka"]
        rows.append(
            f"| {f.label} | produce, RF 1, acks=all | {_rate(single['Kafka'])} | "
            f"{_rate(single['tierlog'])} | {ratio:.2f} | |"
        )
        kafka_overhead = peak["Kafka"] / single["Kafka"]
        tierlog_overhead = peak["tierlog"] / single["tierlog"]
        rows.append(
            f"| {f.label} | replication overhead: RF 3 / RF 1 throughput | "
            f"{kafka_overhead:.2f} | {tierlog_overhead:.2f} | "
            f"{tierlog_overhead / kafka_overhead:.2f} | reported |"
        )
        p99 = {name: med(p.p99_ms for p in runs) for name, runs in f.latency.items()}
        p50 = {name: med(p.p50_ms for p in runs) for name, runs in f.latency.items()}
        achieved = {name: med(p.records_per_s for p in runs) for name, runs in f.latency.items()}
        ratio = p99["tierlog"] / p99["Kafka"] if p99["Kafka"] > 0 else float("inf")
        verdict = f"≤ 1.5x {_verdict(ratio <= 1.5)}"
        if achieved["tierlog"] < RATE_REACHED * f.latency_rate:
            verdict = "≤ 1.5x ✘ (rate not reached)"
        rows.append(
            f"| {f.label} | RF 3 produce at {f.latency_rate:,.0f} rec/s (½ Kafka's peak): "
            f"p99 (p50) | {p99['Kafka']:.1f} ms ({p50['Kafka']:.1f} ms) | "
            f"{p99['tierlog']:.1f} ms ({p50['tierlog']:.1f} ms) | {ratio:.2f} | {verdict} |"
        )
    return "\n".join(rows)


def _seconds(failovers: Sequence[Failover]) -> float | None:
    seconds = [f.seconds for f in failovers]
    if any(s is None for s in seconds):
        return None
    return statistics.median(s for s in seconds if s is not None)


def failover_table(figures: Sequence[FailoverFigures], give_up_s: float) -> str:
    rows = [
        "| timeouts | kill -9 of the leader → next acks=all acknowledgement (median) "
        "| Kafka | tierlog | tierlog/Kafka | target |",
        "|---|---|---|---|---|---|",
    ]
    for f in figures:
        kafka, tierlog = _seconds(f.runs["Kafka"]), _seconds(f.runs["tierlog"])

        def shown(value: float | None) -> str:
            return f"{value:.2f} s" if value is not None else f"none within {give_up_s:g} s"

        if kafka is not None and tierlog is not None:
            ratio, verdict = f"{tierlog / kafka:.2f}", f"≤ 1.0x {_verdict(tierlog <= kafka)}"
        else:
            ratio, verdict = "", "≤ 1.0x ✘"
        rows.append(
            f"| {f.setting} | every run: {_each(f.runs['Kafka'])} / {_each(f.runs['tierlog'])} "
            f"| {shown(kafka)} | {shown(tierlog)} | {ratio} | {verdict} |"
        )
    return "\n".join(rows)


def _each(failovers: Sequence[Failover]) -> str:
    def one(failover: Failover) -> str:
        if failover.leader < 0:
            return "not acknowledged before the kill"
        return "none" if failover.seconds is None else f"{failover.seconds:.2f}"

    return ", ".join(one(failover) for failover in failovers)


# --- main --------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    tools = KafkaTools.locate()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tierlog-replication-bench-"))
    started, load_at_start = time.monotonic(), os.getloadavg()[0]
    throughput: list[ThroughputFigures] = []
    failovers: list[FailoverFigures] = []
    try:
        for setting in ("default", "tuned"):
            if setting == "tuned" and args.skip_tuned:
                continue
            setting_dir = workdir / setting
            with clusters(tools, setting_dir, setting) as systems:
                progress(
                    f"{setting} timeouts: Kafka at {systems[0].cluster.bootstrap_server}, "
                    f"tierlog at {systems[1].cluster.bootstrap_server}"
                )
                if setting == "default" and not args.skip_throughput:
                    throughput = [
                        measure_throughput(label, batch_bytes, systems, args)
                        for label, batch_bytes in BATCH_SIZES.items()
                    ]
                    progress(throughput_table(throughput))  # now, in case a later part fails
                if not args.skip_failover:
                    failovers.append(measure_failovers(setting, systems, setting_dir, args))
                    progress(failover_table(failovers, args.give_up_s))
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"Machine: {machine()}; Kafka {tools.version}.")
    print(
        f"{args.runs} runs of each figure, {args.records:,} records of {RECORD_BYTES} B per "
        f"throughput run, {args.latency_seconds:g} s of records per latency run; "
        f"{time.monotonic() - started:.0f} s in all; 1-minute load average {load_at_start:.1f} "
        f"before the run, {os.getloadavg()[0]:.1f} at its end."
    )
    if throughput:
        print()
        print(throughput_table(throughput))
    if failovers:
        print()
        print(failover_table(failovers, args.give_up_s))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="of each figure; medians reported")
    parser.add_argument("--records", type=int, default=200_000, help="per throughput run")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="per latency run")
    parser.add_argument(
        "--give-up-s", type=float, default=40.0, help="a failover not seen by then: none"
    )
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--skip-tuned", action="store_true", help="failover at defaults only")
    parser.add_argument("--workdir", help="keep the data here (default: a temporary dir)")
    parser.add_argument("--probe", nargs=2, metavar=("SERVER", "TOPIC"), help=argparse.SUPPRESS)
    parser.add_argument("--probe-records", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--prop", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        server, topic = args.probe
        run_probe(server, topic, args.probe_records, args.prop)
    else:
        run(args)


if __name__ == "__main__":
    main()
