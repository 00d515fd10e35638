"""Issue 19's figures: consumer groups (KIP-848) on one tierlog sidecar beside one Kafka
broker with ``group.protocol=consumer``, one run.

Run from the repository root (needs ``make tools``)::

    .venv/bin/python -m tests.benchmarks.groups_bench

Kafka is the interop harness's single-node KRaft broker (``KafkaBroker``); tierlog one
``tierlog-sidecar``; both on 127.0.0.1, both with 50 ``__consumer_offsets`` partitions
of one replica. Every member is a process of its own: Kafka's ``KafkaConsumer``
(``tests/benchmarks/java/GroupMember.java``, compiled here against Kafka's jars, with
``group.protocol=consumer``) against ``tierlog.client.Consumer`` (this module run with
``--member``), both printing the same JSON events with the wall-clock ms they happened,
both polling every 50 ms, auto-commit off, ``auto.offset.reset=earliest``.

- Commit latency: a member of a group of one on a one-partition topic commits offsets
  1, 2, ... one at a time, synchronously (``commitSync(offsets)`` / ``commit(offsets)``:
  back once the coordinator's log has the commit); p50 and p99 of the measured commits,
  after unmeasured ones that warm up the connection and the JIT.
- Join: a member owns all 6 partitions of a topic (10 records each); a second member
  subscribes; the figure runs from its ``subscribe`` call to the moment both own 3 (the
  later of the first member's revocation and the second's assignment callback). Each
  member process first joins a group of its own on the topic and leaves it, so that the
  join measured is a running client's (a cold JVM's first heartbeat alone took 1.7 s).
- ``kill -9``: once the second member has read its 3 partitions, it gets SIGKILL; the
  figure runs from the kill to the moment the survivor has read a record of each of
  those 3 partitions again (nothing was committed, so there are records to read).

Both figures are mostly waits for heartbeats, so the second member joins at a random
point of the first member's heartbeat cycle and is killed at a random point of its own
(the same points for both systems in a run; each process starts and warms up first,
then waits for the bench's signal to subscribe).

The rebalance figures are measured with each system's default timeouts
(``group.consumer.session.timeout.ms`` 45 s, ``group.consumer.heartbeat.interval.ms``
5 s on both) and with tuned ones (3 s and 500 ms on both; Kafka's broker also needs its
``group.consumer.min.*`` bounds lowered to allow them), each on fresh brokers. Every
figure is run ``--runs`` times, Kafka then tierlog, and medians are reported in Markdown
tables with the ratios tierlog/Kafka and issue 19's targets (at most Kafka's).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tests.benchmarks.kafka_comparison_bench import PERF_TOOL_JVM_ARGS, machine, progress
from tests.benchmarks.replication_bench import wait_until
from tests.interop.kafka import QUIET_LOGGING, KafkaBroker, KafkaTools, ProducerRecord
from tests.support.sidecars import SidecarProcess
from tierlog.client import AdminClient, Consumer, Producer, TopicPartition
from tierlog.client.groups import OffsetAndMetadata

MODULE = "tests.benchmarks.groups_bench"  # run with -m from the repository root
REPO = Path(__file__).resolve().parents[2]
JAVA_MEMBER = Path(__file__).resolve().parent / "java" / "GroupMember.java"
PARTITIONS = 6
SHARE = PARTITIONS // 2  # each of two members' part
RECORDS_PER_PARTITION = 10
POLL_MS = 50  # GroupMember.java's too
COMMIT_WARMUP = 200
# Issue 19's tuned timeouts, the same on both sides; Kafka refuses a session or an
# interval below its group.consumer.min.* bounds (45 s and 5 s by default).
TUNED_TIMEOUTS = {
    "group.consumer.session.timeout.ms": "3000",
    "group.consumer.heartbeat.interval.ms": "500",
}
DEFAULT_HEARTBEAT_INTERVAL_MS = 5000  # both systems' default
TUNED_KAFKA_BOUNDS = {
    "group.consumer.min.session.timeout.ms": "3000",
    "group.consumer.min.heartbeat.interval.ms": "500",
}
# A diagnostic commit run: Kafka's coordinator holds its writes for up to
# group.coordinator.append.linger.ms (5 ms by default since 4.0) to batch them; tierlog's
# writes each commit at once.
NO_LINGER = "Kafka without append linger"
MEMBER_CONFIGS = {"enable.auto.commit": "false", "auto.offset.reset": "earliest"}


# --- the two systems --------------------------------------------------------------------------


class GroupSystem(Protocol):
    name: str

    def create_topic(self, topic: str, partitions: int) -> None: ...

    def preload(self, topic: str, partitions: int) -> None: ...

    def member_command(self, mode: str, group: str, topic: str, *args: str) -> list[str]: ...


@dataclass
class KafkaSide:
    tools: KafkaTools
    broker: KafkaBroker
    classes: Path  # GroupMember.class
    name: str = "Kafka"

    def create_topic(self, topic: str, partitions: int) -> None:
        self.broker.create_topic(topic, partitions=partitions)

    def preload(self, topic: str, partitions: int) -> None:
        self.broker.produce(topic, list(preload_records(partitions)))

    def member_command(self, mode: str, group: str, topic: str, *args: str) -> list[str]:
        return [
            str(self.tools.java),
            *PERF_TOOL_JVM_ARGS,
            *QUIET_LOGGING,
            *("-cp", f"{self.tools.classpath}{os.pathsep}{self.classes}"),
            *("GroupMember", mode, self.broker.bootstrap_server, group, topic, *args),
        ]


def preload_records(partitions: int) -> Iterator[ProducerRecord]:
    for partition in range(partitions):
        for n in range(RECORDS_PER_PARTITION):
            yield ProducerRecord(None, f"{partition}-{n}".encode(), partition=partition)


def compile_java_member(tools: KafkaTools, classes: Path) -> Path:
    """GroupMember.java compiled against Kafka's jars (outside ``make tools``: a
    benchmark's program, not an interop helper every test run needs)."""
    classes.mkdir(parents=True, exist_ok=True)
    javac = tools.java.with_name("javac")
    subprocess.run(
        [str(javac), "-nowarn", "-d", str(classes), "-cp", tools.classpath, str(JAVA_MEMBER)],
        check=True,
        capture_output=True,
    )
    return classes


@dataclass
class TierlogSide:
    sidecar: SidecarProcess
    name: str = "tierlog"

    def create_topic(self, topic: str, partitions: int) -> None:
        with AdminClient(self.sidecar.address) as admin:
            admin.create_topic(topic, partitions)

    def preload(self, topic: str, partitions: int) -> None:
        with Producer({"bootstrap.servers": self.sidecar.address}) as producer:
            for record in preload_records(partitions):
                producer.send(topic, record.value, partition=record.partition)
            producer.flush()

    def member_command(self, mode: str, group: str, topic: str, *args: str) -> list[str]:
        return [
            sys.executable,
            *("-m", MODULE, "--member", mode, self.sidecar.address, group, topic, *args),
        ]


# --- tierlog's member (GroupMember.java's twin) -----------------------------------------------


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "ms": int(time.time() * 1000), **fields}), flush=True)


def member_consumer(server: str, group: str, props: Sequence[str]) -> Consumer:
    config = {"bootstrap.servers": server, "group.id": group, **MEMBER_CONFIGS}
    config.update(prop.partition("=")[::2] for prop in props)
    return Consumer(config)


def run_commits(server: str, group: str, topic: str, args: Sequence[str]) -> None:
    warmup, count, *props = args
    tp = TopicPartition(topic, 0)
    consumer = member_consumer(server, group, props)
    consumer.subscribe([topic])
    while tp not in consumer.assignment():
        consumer.poll(POLL_MS)
    latencies_ms = []
    for offset in range(1, int(warmup) + int(count) + 1):
        started = time.perf_counter()
        consumer.commit({tp: OffsetAndMetadata(offset)})
        if offset > int(warmup):
            latencies_ms.append((time.perf_counter() - started) * 1000)
    last = int(warmup) + int(count)
    committed = consumer.committed([tp]).get(tp)
    if committed is None or committed.offset != last:  # the commits were stored, not just answered
        raise SystemExit(f"committed {committed}, expected {last}")
    emit("commits", latencies_ms=latencies_ms)
    consumer.close()


def warm_up(server: str, group: str, topic: str, props: Sequence[str]) -> None:
    """A member of a group of its own first, until it owns a partition: the measured join
    is then a running application's, not a fresh process's first calls."""
    consumer = member_consumer(server, group, props)
    consumer.subscribe([topic])
    while not consumer.assignment():
        consumer.poll(POLL_MS)
    consumer.close()


def run_member(server: str, group: str, topic: str, args: Sequence[str]) -> None:
    done, go, *props = args
    warm_up(server, f"{group}-warmup", topic, props)
    emit("ready")
    while not Path(go).exists():  # the bench picks the moment to join
        time.sleep(0.001)
    owned: set[int] = set()
    consumed: set[int] = set()  # read since assigned
    consumer = member_consumer(server, group, props)

    def changed(event: str, tps: list[TopicPartition], added: bool) -> None:
        partitions = {tp.partition for tp in tps}
        if added:
            owned.update(partitions)
        else:
            owned.difference_update(partitions)
            consumed.difference_update(partitions)
        emit(event, partitions=sorted(partitions), owned=sorted(owned))

    emit("subscribed")
    consumer.subscribe(
        [topic],
        on_assign=lambda tps: changed("assigned", tps, True),
        on_revoke=lambda tps: changed("revoked", tps, False),
        on_lost=lambda tps: changed("lost", tps, False),
    )
    while not Path(done).exists():
        for record in consumer.poll(POLL_MS):
            if record.partition not in consumed:
                consumed.add(record.partition)
                emit("consumed", partition=record.partition)
    consumer.close()
    emit("closed")


# --- a member process and its events ----------------------------------------------------------


@dataclass
class Member:
    """One member process, its events in ``<name>.jsonl``."""

    system: GroupSystem
    group: str
    topic: str
    path: Path
    done: Path = field(init=False)
    go: Path = field(init=False)  # its subscribe waits for this file
    process: subprocess.Popen[bytes] = field(init=False)

    def start(self) -> Member:
        self.done = self.path.with_suffix(".done")
        self.go = self.path.with_suffix(".go")
        command = self.system.member_command(
            "member", self.group, self.topic, str(self.done), str(self.go)
        )
        with self.path.open("wb") as out, self.path.with_suffix(".err").open("wb") as err:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=REPO
            )
        return self

    def events(self) -> list[dict[str, Any]]:
        return events(self.path)

    def owned(self) -> set[int]:
        changes = [e for e in self.events() if "owned" in e]
        return set(changes[-1]["owned"]) if changes else set()

    def settled_ms(self, size: int, after_ms: float) -> float | None:
        """When this member first owned ``size`` partitions after ``after_ms``."""
        return next(
            (
                e["ms"]
                for e in self.events()
                if "owned" in e and e["ms"] >= after_ms and len(e["owned"]) == size
            ),
            None,
        )

    def event_ms(self, event: str) -> float | None:
        return next((e["ms"] for e in self.events() if e["event"] == event), None)

    def consumed_ms(self, partition: int, after_ms: float) -> float | None:
        return next(
            (
                e["ms"]
                for e in self.events()
                if e["event"] == "consumed" and e["partition"] == partition and e["ms"] > after_ms
            ),
            None,
        )

    def stop(self) -> None:
        """Closes (leaves the group) when told; SIGKILL if that hangs."""
        self.done.touch()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def events(path: Path) -> list[dict[str, Any]]:
    found = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and "event" in event:
                found.append(event)
    return found


# --- the measurements -------------------------------------------------------------------------


@dataclass(frozen=True)
class Commits:
    p50_ms: float
    p99_ms: float


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure_commits(system: GroupSystem, tag: str, workdir: Path, count: int) -> Commits:
    topic, group = f"commit-{tag}", f"commit-{tag}"
    system.create_topic(topic, 1)
    command = system.member_command("commit", group, topic, str(COMMIT_WARMUP), str(count))
    done = subprocess.run(command, capture_output=True, timeout=600, check=False, cwd=REPO)
    output = workdir / f"{system.name}-{tag}.jsonl"
    output.write_bytes(done.stdout + done.stderr)
    commits = [e for e in events(output) if e["event"] == "commits"]
    if done.returncode != 0 or not commits:
        raise RuntimeError(f"{system.name}'s commits failed, see {output}")
    latencies = commits[0]["latencies_ms"]
    return Commits(percentile(latencies, 0.5), percentile(latencies, 0.99))


def sleep_until_phase(beats_from_ms: float, interval_s: float, fraction: float) -> None:
    """Until the next moment ``fraction`` of an interval after a heartbeat of a member
    whose heartbeats fall every ``interval_s`` from ``beats_from_ms``."""
    since_s = time.time() - beats_from_ms / 1000
    target_s = (since_s // interval_s + fraction) * interval_s
    if target_s < since_s:
        target_s += interval_s
    time.sleep(target_s - since_s)


@dataclass(frozen=True)
class Rebalance:
    join_s: float | None  # None: not settled within give_up_s
    kill_s: float | None


def measure_rebalance(
    system: GroupSystem, tag: str, workdir: Path, give_up_s: float, heartbeat_interval_s: float
) -> Rebalance:
    """Both figures wait for heartbeats, so where the join and the kill fall in the
    members' heartbeat cycles decides a good part of them: each is put at a random point
    of a heartbeat interval (the same points for both systems in one run)."""
    topic, group = f"rebalance-{tag}", f"rebalance-{tag}"
    phases = random.Random(tag)
    system.create_topic(topic, PARTITIONS)
    system.preload(topic, PARTITIONS)
    prefix = workdir / f"{system.name}-{tag}"
    first = Member(system, group, topic, prefix.with_name(prefix.name + "-first.jsonl")).start()
    first.go.touch()
    second: Member | None = None
    try:
        wait_until(lambda: len(first.owned()) == PARTITIONS, "the first member", give_up_s)
        second = Member(system, group, topic, prefix.with_name(prefix.name + "-second.jsonl"))
        second.start()
        wait_until(lambda: second.event_ms("ready") is not None, "the second member", give_up_s)
        # The first member's heartbeats are due a whole number of intervals after its
        # first answer (its assignment): join a random fraction of an interval after one.
        beats_from_ms = first.event_ms("assigned")
        assert beats_from_ms is not None
        sleep_until_phase(beats_from_ms, heartbeat_interval_s, phases.random())
        second.go.touch()
        join_s = None
        with contextlib.suppress(TimeoutError):
            wait_until(
                lambda: len(first.owned()) == SHARE == len(second.owned()),
                "two members of 3",
                give_up_s + 30,  # the JVM's or the interpreter's start comes first
            )
            subscribed = next(e["ms"] for e in second.events() if e["event"] == "subscribed")
            settled = [first.settled_ms(SHARE, subscribed), second.settled_ms(SHARE, subscribed)]
            join_s = (max(ms for ms in settled if ms is not None) - subscribed) / 1000
        if join_s is None:
            return Rebalance(None, None)
        victims = second.owned()
        wait_until(
            lambda: all(second.consumed_ms(p, 0) is not None for p in victims),
            "the second member to read its partitions",
        )
        # The same for the kill, in the second member's cycle (from its assignment).
        beats_from_ms = second.settled_ms(SHARE, 0)
        assert beats_from_ms is not None
        sleep_until_phase(beats_from_ms, heartbeat_interval_s, phases.random())
        kill_ms = time.time() * 1000
        second.process.kill()
        second.process.wait()

        def read_again() -> list[float | None]:
            return [first.consumed_ms(p, kill_ms) for p in victims]

        with contextlib.suppress(TimeoutError):
            wait_until(lambda: None not in read_again(), "the survivor to read them", give_up_s)
        again = read_again()
        kill_s = None if None in again else (max(a for a in again if a) - kill_ms) / 1000
        return Rebalance(join_s, kill_s)
    finally:
        for member in (first, second):
            if member is not None and member.process.poll() is None:
                member.stop()


def measure_commit_runs(
    pair: Sequence[GroupSystem], workdir: Path, args: argparse.Namespace
) -> dict[str, list[Commits]]:
    runs: dict[str, list[Commits]] = {system.name: [] for system in pair}
    for run_index in range(args.runs):
        for system in pair:
            figure = measure_commits(system, f"{run_index}", workdir, args.commits)
            runs[system.name].append(figure)
            progress(f"commits, {system.name} #{run_index + 1}: {figure}")
    return runs


def heartbeat_interval_ms(setting: str) -> int:
    timeouts = TUNED_TIMEOUTS if setting == "tuned" else {}
    return int(timeouts.get("group.consumer.heartbeat.interval.ms", DEFAULT_HEARTBEAT_INTERVAL_MS))


@contextlib.contextmanager
def systems(
    tools: KafkaTools, classes: Path, workdir: Path, setting: str
) -> Iterator[tuple[KafkaSide, TierlogSide]]:
    timeouts = TUNED_TIMEOUTS if setting == "tuned" else {}
    kafka_configs = {**timeouts, **(TUNED_KAFKA_BOUNDS if timeouts else {})}
    if setting == NO_LINGER:
        kafka_configs = {"group.coordinator.append.linger.ms": "0"}
    sidecar = SidecarProcess(
        workdir / "tierlog" / "data", tuple(f"{k}={v}" for k, v in timeouts.items())
    )
    with KafkaBroker(tools, workdir / "kafka", broker_configs=kafka_configs) as broker:
        (workdir / "tierlog").mkdir(parents=True, exist_ok=True)
        sidecar.start()
        try:
            yield KafkaSide(tools, broker, classes), TierlogSide(sidecar)
        finally:
            sidecar.stop()


# --- the tables -------------------------------------------------------------------------------


def _verdict(ratio: float | None) -> str:
    if ratio is None:
        return "≤ 1.0x ✘"
    return f"≤ 1.0x {'✔' if ratio <= 1.0 else '✘'}"


def commit_table(settings: Mapping[str, Mapping[str, list[Commits]]]) -> str:
    med = statistics.median
    rows = [
        "| brokers | figure (median of runs) | every run, ms (Kafka / tierlog) | Kafka "
        "| tierlog | tierlog/Kafka | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for setting, runs in settings.items():
        for label, attr in (("p50", "p50_ms"), ("p99", "p99_ms")):
            figure = {name: med(getattr(c, attr) for c in each) for name, each in runs.items()}
            each = " / ".join(
                ", ".join(f"{getattr(c, attr):.2f}" for c in runs[name])
                for name in ("Kafka", "tierlog")
            )
            ratio = figure["tierlog"] / figure["Kafka"]
            rows.append(
                f"| {setting} | synchronous commit, {label} | {each} | {figure['Kafka']:.2f} ms "
                f"| {figure['tierlog']:.2f} ms | {ratio:.2f} | {_verdict(ratio)} |"
            )
    return "\n".join(rows)


def _median_s(values: Sequence[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return statistics.median(v for v in values if v is not None)


def _shown_s(value: float | None) -> str:
    return "none" if value is None else f"{value:.2f} s"


def rebalance_table(figures: Mapping[str, Mapping[str, list[Rebalance]]]) -> str:
    rows = [
        "| timeouts | figure (median of runs) | every run, s (Kafka / tierlog) | Kafka "
        "| tierlog | tierlog/Kafka | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for setting, runs in figures.items():
        for label, attr in (
            ("second member's join → 3 + 3 partitions", "join_s"),
            ("`kill -9` of a member → its partitions read again", "kill_s"),
        ):
            values = {name: [getattr(r, attr) for r in each] for name, each in runs.items()}
            each = " / ".join(
                ", ".join("none" if v is None else f"{v:.2f}" for v in values[name])
                for name in ("Kafka", "tierlog")
            )
            kafka, tierlog = _median_s(values["Kafka"]), _median_s(values["tierlog"])
            ratio = None if kafka is None or tierlog is None else tierlog / kafka
            shown = {
                n: "none" if v is None else f"{v:.2f} s" for n, v in (("k", kafka), ("t", tierlog))
            }
            rows.append(
                f"| {setting} | {label} | {each} | {shown['k']} | {shown['t']} "
                f"| {'' if ratio is None else f'{ratio:.2f}'} | {_verdict(ratio)} |"
            )
    return "\n".join(rows)


# --- main -------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    tools = KafkaTools.locate()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tierlog-groups-bench-"))
    started, load_at_start = time.monotonic(), os.getloadavg()[0]
    classes = compile_java_member(tools, workdir / "classes")
    commits: dict[str, dict[str, list[Commits]]] = {}
    rebalances: dict[str, dict[str, list[Rebalance]]] = {}
    try:
        for setting in ("default", NO_LINGER, "tuned"):
            if setting != "tuned" and args.skip_commits and args.skip_default:
                continue
            if setting == NO_LINGER and args.skip_commits:
                continue
            setting_dir = workdir / setting.replace(" ", "-")
            with systems(tools, classes, setting_dir, setting) as pair:
                if setting != "tuned" and not args.skip_commits:
                    commits[setting] = measure_commit_runs(pair, setting_dir, args)
                    progress(commit_table(commits))
                if setting == NO_LINGER or (setting == "default" and args.skip_default):
                    continue
                runs: dict[str, list[Rebalance]] = {"Kafka": [], "tierlog": []}
                interval_s = heartbeat_interval_ms(setting) / 1000
                rebalances[setting] = runs
                for run_index in range(args.runs):
                    for system in pair:
                        figure = measure_rebalance(
                            system, f"{run_index}", setting_dir, args.give_up_s, interval_s
                        )
                        runs[system.name].append(figure)
                        progress(f"{setting} timeouts, {system.name} #{run_index + 1}: {figure}")
                progress(rebalance_table(rebalances))
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"Machine: {machine()}; Kafka {tools.version}.")
    print(
        f"{args.runs} runs of each figure, {args.commits} measured commits per run (after "
        f"{COMMIT_WARMUP}); {time.monotonic() - started:.0f} s in all; 1-minute load average "
        f"{load_at_start:.1f} before the run, {os.getloadavg()[0]:.1f} at its end."
    )
    if commits:
        print()
        print(commit_table(commits))
    print()
    print(rebalance_table(rebalances))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="of each figure; medians reported")
    parser.add_argument("--commits", type=int, default=1000, help="measured per commit run")
    parser.add_argument(
        "--give-up-s", type=float, default=120.0, help="a rebalance not seen by then: none"
    )
    parser.add_argument("--skip-commits", action="store_true")
    parser.add_argument("--skip-default", action="store_true", help="rebalances: tuned only")
    parser.add_argument("--workdir", help="keep the data and events here (default: a temp dir)")
    parser.add_argument("--member", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.member:
        mode, server, group, topic, *rest = args.member
        (run_commits if mode == "commit" else run_member)(server, group, topic, rest)
    else:
        run(args)


if __name__ == "__main__":
    main()
