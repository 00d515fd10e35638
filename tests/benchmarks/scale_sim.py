"""Issue 32, "a hundred brokers on paper": the real controller, placement and
partition-state store with simulated brokers, at 10 to 100 brokers and 10,000 to
200,000 partitions (docs/SCALE.md reads the figures).

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.scale_sim --store local \\
        --brokers 10,30,100 --partitions 10000,50000,200000
    .venv/bin/python -m tests.benchmarks.scale_sim --store kube ...   # needs make tools
    .venv/bin/python -m tests.benchmarks.scale_sim --quick            # a few seconds

What is real: the store (``LocalStateStore`` on a directory, or ``KubeStateStore``
against the tests' etcd and kube-apiserver, started here), every broker's lease kept by
a real ``LeaseKeeper`` thread (its heartbeats), topics placed by ``assign_replicas``,
the ``Controller``'s passes, leaders' ISR expansions by ``alter_isrs`` as the replica
manager sends them, and one broker's polls by ``StoreFollower``, what a broker reads
every ``state_poll_ms`` (its first, which reads everything, then an idle one, which
reads the store's journal of changes and the leases). What is simulated: the brokers
hold no logs and run no sidecar; a broker "fails" when its keeper stops renewing, and
"catches up" at once when it returns. The store is wrapped (``MeteredStore``) to count
its reads and writes: every decision is still the store's shared code, every read and
write the real store's.

Each scenario (brokers x partitions, topics of ``--partitions-per-topic``, replication
factor 3) measures:

1. *create*: every topic created; the store's largest object afterwards.
2. *idle pass*: one controller pass with nothing to change (the floor of every pass).
3. *poll*: one broker's first read of the store, then an idle poll, and so the read
   load of every broker polling an idle store.
4. *failure*: the broker that leads the most partitions stops renewing its lease; the
   time until the controller has fenced it and every partition it led is led again, and
   the writes, bytes and write rate that took.
5. *return*: it takes its lease again; each leader adds it back to the ISRs of its
   partitions (``alter_isrs``, a batch per leader and topic, as each leader's replica
   manager sends them); then a controller pass gives it back its preferred
   leaderships. Writes, bytes, time of each.
6. *heartbeats*: lease writes a second over the whole scenario.

Lease duration is Kafka's ``broker.session.timeout.ms`` (9 s) and the controller passes
run every second, as the operator's do; ``--quick`` shrinks all of it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from lightkube import Client, KubeConfig
from lightkube.resources.core_v1 import ConfigMap

from tests.benchmarks.kafka_comparison_bench import machine, progress
from tests.support.kube import start_control_plane
from tierlog.api.errors import IneligibleReplicaError
from tierlog.broker.scram_credentials import CredentialDocument
from tierlog.controller.controller import Controller
from tierlog.operator.render.configmap import REPLICATION_STATE_POLL_MS
from tierlog.partition_state.change_journal import ChangeCursor, TopicChanges
from tierlog.partition_state.kube_store import KubeStateStore, part_config_map_name
from tierlog.partition_state.lease_keeper import LeaseKeeper
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import (
    NO_LEADER,
    BrokerLease,
    PartitionState,
    lease_to_document,
)
from tierlog.partition_state.store import LeaseChange, PartChange, PartitionStateStore
from tierlog.partition_state.store_follower import StoreFollower
from tierlog.replication.config import ReplicationConfig
from tierlog.replication.placement import assign_replicas
from tierlog.tools.progress import Track, choose_tracker

REPLICATION_FACTOR = 3
JOURNAL_HEADER_BYTES = 40  # "<incarnation> <last change>": what an idle poll reads
KUBE_OBJECT_LIMIT_BYTES = 1024 * 1024  # a ConfigMap's data (kube-apiserver refuses more)
# How often each broker reads the store: the sidecar's default on one machine, the
# operator's setting on Kubernetes.
POLL_INTERVAL_S = {
    "local": ReplicationConfig.state_poll_ms / 1000,
    "kube": REPLICATION_STATE_POLL_MS / 1000,
}


@dataclass
class StoreMeter:
    """What the store was asked to do, counted as the real store did it."""

    part_writes: int = 0
    part_bytes_written: int = 0
    lease_writes: int = 0
    lease_bytes_written: int = 0
    reads: int = 0  # parts, leases lists, topic lists, configs
    bytes_read: int = 0
    largest_part_bytes: int = 0
    largest_part: tuple[str, int, str] = ("", 0, "")

    def since(self, before: StoreMeter) -> StoreMeter:
        return StoreMeter(
            self.part_writes - before.part_writes,
            self.part_bytes_written - before.part_bytes_written,
            self.lease_writes - before.lease_writes,
            self.lease_bytes_written - before.lease_bytes_written,
            self.reads - before.reads,
            self.bytes_read - before.bytes_read,
            self.largest_part_bytes,
            self.largest_part,
        )


class MeteredStore(PartitionStateStore):
    """The store's shared code over ``inner``'s primitives, each one counted."""

    def __init__(self, inner: PartitionStateStore) -> None:
        super().__init__()
        self.inner = inner
        self.meter = StoreMeter()
        self._lock = threading.Lock()  # lease keepers count from their threads

    def snapshot(self) -> StoreMeter:
        with self._lock:
            return replace(self.meter)

    def scram_credentials(self) -> CredentialDocument:
        return self.inner.scram_credentials()

    def list_topics(self) -> list[str]:
        topics = self.inner.list_topics()
        self._read(sum(map(len, topics)))
        return topics

    def read_leases(self) -> dict[int, BrokerLease]:
        leases = self.inner.read_leases()
        self._read(sum(len(json.dumps(lease_to_document(lease))) for lease in leases.values()))
        return leases

    def topic_changes(self, since: ChangeCursor | None) -> TopicChanges:
        """Counted as a read of the journal's first line and the topics it names (the
        local store's; the Kubernetes store's journal is in memory, fed by its watch)."""
        changes = self.inner.topic_changes(since)
        self._read(JOURNAL_HEADER_BYTES + sum(map(len, changes.topics or ())))
        return changes

    def watch_changes(self, changed: Callable[[], None]) -> Callable[[], None]:
        return self.inner.watch_changes(changed)  # no request: not counted

    def _read_part(self, topic: str, index: int, topic_id: str) -> str | None:
        text = self.inner._read_part(topic, index, topic_id)
        self._read(len(text or ""))
        return text

    def _update_part(self, topic: str, index: int, topic_id: str, change: PartChange) -> None:
        written: list[str | None] = [None]

        def recorded(current: str | None) -> str | None:
            written[0] = change(current)  # the last try is the one that wrote
            return written[0]

        before = self.inner.part_writes
        self.inner._update_part(topic, index, topic_id, recorded)
        if self.inner.part_writes == before:
            return
        size = len(written[0] or "")
        with self._lock:
            self.part_writes += 1
            self.meter.part_writes += 1
            self.meter.part_bytes_written += size
            if size > self.meter.largest_part_bytes:
                self.meter.largest_part_bytes = size
                self.meter.largest_part = (topic, index, topic_id)

    def _read_configs(self, topic: str) -> dict[str, str] | None:
        configs = self.inner._read_configs(topic)
        self._read(len(json.dumps(configs)) if configs is not None else 0)
        return configs

    def _write_configs(self, topic: str, configs: dict[str, str] | None) -> None:
        self.inner._write_configs(topic, configs)

    def _update_lease(self, broker: int, change: LeaseChange) -> BrokerLease:
        lease = self.inner._update_lease(broker, change)
        with self._lock:
            self.meter.lease_writes += 1
            self.meter.lease_bytes_written += len(json.dumps(lease_to_document(lease)))
        return lease

    def _read(self, size: int) -> None:
        with self._lock:
            self.meter.reads += 1
            self.meter.bytes_read += size


@dataclass(frozen=True)
class Settings:
    lease_s: float = 9.0  # broker.session.timeout.ms
    controller_interval_s: float = 1.0  # the operator's CONTROLLER_INTERVAL_S
    partitions_per_topic: int = 100
    with_return: bool = True  # bring the failed broker back (the longest phase)
    seed: int = 32


@dataclass
class Figures:
    store: str
    brokers: int
    partitions: int
    topics: int
    create_s: float = 0.0
    objects: int = 0
    largest_object_bytes: int = 0  # as stored (a ConfigMap's whole JSON, or the file)
    idle_pass_s: float = 0.0
    first_poll_s: float = 0.0  # a broker's first read: everything
    first_poll_reads: int = 0
    first_poll_bytes: int = 0
    poll_s: float = 0.0  # then a poll of the idle store
    poll_reads: int = 0
    poll_bytes: int = 0
    victim: int = -1
    victim_led: int = 0
    fenced_after_s: float = 0.0  # from the last renewal stopped
    absorbed_after_s: float = 0.0  # every partition it led led again
    failover_pass_s: float = 0.0  # the passes that wrote the elections
    failover_writes: int = 0
    failover_bytes: int = 0
    isr_expansions: int = 0
    isr_refusals: int = 0  # batches refused: the returning broker's renewal came late
    isr_expansion_s: float = 0.0
    isr_expansion_writes: int = 0
    isr_expansion_bytes: int = 0
    preferred_pass_s: float = 0.0
    preferred_writes: int = 0
    preferred_bytes: int = 0
    heartbeat_writes_per_s: float = 0.0
    unled_after_failure: int = 0
    unled_after_return: int = 0

    @property
    def failover_writes_per_s(self) -> float:
        return self.failover_writes / max(self.failover_pass_s, 1e-9)

    @property
    def poll_load(self) -> tuple[float, float]:
        """Every broker reading the store every ``state_poll_ms`` (or back to back, when
        a read takes longer): reads a second, bytes a second."""
        polls_per_s = self.brokers / max(POLL_INTERVAL_S[self.store], self.poll_s)
        return polls_per_s * self.poll_reads, polls_per_s * self.poll_bytes


# -- the store under test ---------------------------------------------------------------


class Stores:
    """Fresh stores of one kind, one a scenario; a control plane started once if kube."""

    def __init__(self, kind: str, workdir: Path) -> None:
        self.kind = kind
        self.workdir = workdir
        self._plane = start_control_plane(workdir / "kube") if kind == "kube" else None

    @contextmanager
    def fresh(self) -> Iterator[PartitionStateStore]:
        if self._plane is None:
            yield LocalStateStore(Path(tempfile.mkdtemp(dir=self.workdir, prefix="state-")))
            return
        namespace = self._plane.create_namespace("scale")
        client = Client(KubeConfig.from_file(self._plane.kubeconfig), field_manager="scale-sim")
        store = KubeStateStore(client, namespace, "sim")
        try:
            yield store
        finally:
            store.close()  # its watch, before the namespace goes
        self._plane.kubectl("delete", "namespace", namespace, "--wait=false")

    def stop(self) -> None:
        if self._plane is not None:
            self._plane.stop()


def stored_object_bytes(inner: PartitionStateStore, topic: str, index: int, topic_id: str) -> int:
    """The size of a part as the store keeps it: the whole ConfigMap as the API server
    serves it (metadata, labels, the document escaped in a JSON string), or the file."""
    if isinstance(inner, KubeStateStore):
        name = part_config_map_name(inner.cluster, topic, index, topic_id)
        found = inner._client.get(ConfigMap, name, namespace=inner.namespace)
        return len(json.dumps(found.to_dict()))
    return len(inner._read_part(topic, index, topic_id) or "")


# -- the scenario -------------------------------------------------------------------------


def run_scenario(
    inner: PartitionStateStore,
    kind: str,
    brokers: int,
    partitions: int,
    settings: Settings,
    track: Track,
) -> Figures:
    store = MeteredStore(inner)
    topics = max(1, partitions // settings.partitions_per_topic)
    figures = Figures(kind, brokers, topics * settings.partitions_per_topic, topics)
    started = time.monotonic()
    keepers = {broker: _keeper(store, broker, settings) for broker in range(brokers)}
    try:
        _create_topics(store, figures, settings, track)
        figures.largest_object_bytes = stored_object_bytes(inner, *store.meter.largest_part)
        controller = Controller(store, clock=time.monotonic)
        controller.step()  # the first pass sees every lease and counts it alive
        figures.idle_pass_s = _timed(controller.step)
        _measure_poll(store, figures)
        _fail_broker(store, controller, keepers, figures, settings)
        if settings.with_return:
            keepers[figures.victim] = _keeper(store, figures.victim, settings)
            _return_broker(store, controller, figures, settings, track)
    finally:
        for keeper in keepers.values():
            keeper.stop()
    elapsed = time.monotonic() - started
    figures.heartbeat_writes_per_s = store.meter.lease_writes / elapsed
    return figures


def _keeper(store: PartitionStateStore, broker: int, settings: Settings) -> LeaseKeeper:
    keeper = LeaseKeeper(store, broker, f"sim-{broker}-{uuid.uuid4().hex[:8]}", settings.lease_s)
    keeper.start()
    return keeper


def _create_topics(store: MeteredStore, figures: Figures, settings: Settings, track: Track) -> None:
    racks = dict.fromkeys(range(figures.brokers))
    rng = random.Random(settings.seed)
    before = store.snapshot()
    started = time.monotonic()
    with track(f"create {figures.topics} topics", figures.topics, "topic") as advance:
        for number in range(figures.topics):
            replicas = assign_replicas(
                racks,
                settings.partitions_per_topic,
                REPLICATION_FACTOR,
                start_index=rng.randrange(figures.brokers),
            )
            states = {p: PartitionState.new(r) for p, r in replicas.items()}
            store.create_topic(f"topic-{number:05d}", states)
            advance(1)
    figures.create_s = time.monotonic() - started
    figures.objects = store.snapshot().since(before).part_writes


def _measure_poll(store: MeteredStore, figures: Figures) -> None:
    follower = StoreFollower(store)
    before = store.snapshot()
    figures.first_poll_s = _timed(follower.refresh)
    first = store.snapshot().since(before)
    figures.first_poll_reads, figures.first_poll_bytes = first.reads, first.bytes_read
    before = store.snapshot()
    figures.poll_s = _timed(follower.refresh)
    spent = store.snapshot().since(before)
    figures.poll_reads, figures.poll_bytes = spent.reads, spent.bytes_read


def _leaders(store: PartitionStateStore) -> dict[tuple[str, int], PartitionState]:
    return {
        (topic, partition): state
        for topic, (states, _configs) in StoreFollower(store).refresh().topics.items()
        for partition, state in states.items()
    }


def _fail_broker(
    store: MeteredStore,
    controller: Controller,
    keepers: dict[int, LeaseKeeper],
    figures: Figures,
    settings: Settings,
) -> None:
    """Stop the busiest leader's renewals; pass after pass until all it led is led."""
    states = _leaders(store)
    led_by: dict[int, int] = {}
    for state in states.values():
        led_by[state.leader] = led_by.get(state.leader, 0) + 1
    victim = max(led_by, key=lambda broker: (led_by[broker], -broker))
    figures.victim, figures.victim_led = victim, led_by[victim]
    keepers[victim].stop()
    stopped = time.monotonic()
    before = store.snapshot()
    waiting = {tp for tp, state in states.items() if state.leader == victim}
    deadline = stopped + 3 * settings.lease_s + 600
    while waiting and time.monotonic() < deadline:
        pass_started = time.monotonic()
        changes = controller.step()
        pass_ended = time.monotonic()
        if victim not in controller.live and not figures.fenced_after_s:
            figures.fenced_after_s = pass_started - stopped
        if changes:
            figures.failover_pass_s += pass_ended - pass_started
        for change in changes:
            if change.after.leader not in (victim, NO_LEADER):
                waiting.discard((change.topic, change.partition))
        if waiting:
            time.sleep(max(0.0, pass_started + settings.controller_interval_s - time.monotonic()))
    figures.absorbed_after_s = time.monotonic() - stopped
    spent = store.snapshot().since(before)
    figures.failover_writes, figures.failover_bytes = spent.part_writes, spent.part_bytes_written
    figures.unled_after_failure = sum(
        state.leader in (victim, NO_LEADER) for state in _leaders(store).values()
    )


def _return_broker(
    store: MeteredStore,
    controller: Controller,
    figures: Figures,
    settings: Settings,
    track: Track,
) -> None:
    """The failed broker is back: its leaders add it to each ISR (caught up at once),
    then a controller pass hands back its preferred leaderships."""
    victim = figures.victim
    behind = {
        tp: state
        for tp, state in _leaders(store).items()
        if victim in state.replicas and victim not in state.isr
    }
    figures.isr_expansions = len(behind)
    # Each leader's replica manager batches the ISR changes one fetch of the returning
    # follower brings, by topic (ReplicaManager._send_isr_changes): one batch per
    # leader and topic.
    batches: dict[tuple[int, str], dict[int, tuple[PartitionState, tuple[int, ...]]]] = {}
    for (topic, partition), state in sorted(behind.items()):
        isr = tuple(r for r in state.replicas if r in {*state.isr, victim})
        batches.setdefault((state.leader, topic), {})[partition] = (state, isr)
    before = store.snapshot()
    started = time.monotonic()
    with track("ISR expansions", len(behind), "partition") as advance:
        for (_leader, topic), changes in sorted(batches.items()):
            figures.isr_refusals += _alter_isrs_until_taken(store, topic, changes, settings)
            advance(len(changes))
    figures.isr_expansion_s = time.monotonic() - started
    spent = store.snapshot().since(before)
    figures.isr_expansion_writes = spent.part_writes
    figures.isr_expansion_bytes = spent.part_bytes_written
    before = store.snapshot()
    controller.step()  # notes the new incarnation's lease
    figures.preferred_pass_s = _timed(controller.step)
    spent = store.snapshot().since(before)
    figures.preferred_writes, figures.preferred_bytes = spent.part_writes, spent.part_bytes_written
    figures.unled_after_return = sum(
        state.leader == NO_LEADER for state in _leaders(store).values()
    )


def _alter_isrs_until_taken(
    store: MeteredStore,
    topic: str,
    changes: dict[int, tuple[PartitionState, tuple[int, ...]]],
    settings: Settings,
) -> int:
    """Send a leader's batch; the times the store refused it. A refusal means the
    returning broker's lease looked expired: its keeper thread, one of a hundred in this
    process on a loaded machine, renewed late. A leader's replica manager sends the
    changes again at the follower's next fetch; here, after the keeper's next renewal."""
    for refusals in range(3):
        try:
            lost = store.alter_isrs(topic, changes).lost
        except IneligibleReplicaError:
            time.sleep(settings.lease_s / 3)
            continue
        if lost:  # nothing else writes these partitions meanwhile
            raise AssertionError(f"{topic}: ISR changes of {sorted(lost)} lost a race")
        return refusals
    raise AssertionError(f"{topic}: the store refused the ISR changes three times")


def _timed(work: Callable[[], object]) -> float:
    started = time.monotonic()
    work()
    return time.monotonic() - started


# -- the command --------------------------------------------------------------------------


def _mib(size: float) -> str:
    if size < 1024:
        return f"{size:.0f} B"
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 1024:.0f} KiB"


def table(rows: list[Figures]) -> str:
    head = (
        "| store | brokers | partitions (topics) | create | largest object | idle pass "
        "| a broker's first read (reads, bytes) | idle poll (reads, bytes) "
        "| every broker polling: reads/s, bytes/s "
        "| failure absorbed (fenced; election passes) "
        "| failover writes (bytes; per s) | ISR rejoin writes (bytes; time) "
        "| preferred back: writes (pass) | heartbeats /s |"
    )
    lines = [head, "|" + "---|" * 14]
    for f in rows:
        reads_per_s, bytes_per_s = f.poll_load
        lines.append(
            f"| {f.store} | {f.brokers} | {f.partitions:,} ({f.topics:,}) | {f.create_s:.0f} s "
            f"| {_mib(f.largest_object_bytes)} | {f.idle_pass_s:.2f} s "
            f"| {_first_poll(f)} | {f.poll_s:.3f} s ({f.poll_reads:,}, {_mib(f.poll_bytes)}) "
            f"| {reads_per_s:,.0f}, {_mib(bytes_per_s)}/s "
            f"| {f.absorbed_after_s:.1f} s ({f.fenced_after_s:.1f} s; {f.failover_pass_s:.2f} s) "
            f"| {f.failover_writes:,} ({_mib(f.failover_bytes)}; {f.failover_writes_per_s:,.0f}) "
            f"| {_return_columns(f)} | {f.heartbeat_writes_per_s:.1f} |"
        )
    return "\n".join(lines)


def _first_poll(f: Figures) -> str:
    if not f.first_poll_reads:  # a run from before the journal: every poll read everything
        return "as the poll"
    return f"{f.first_poll_s:.2f} s ({f.first_poll_reads:,}, {_mib(f.first_poll_bytes)})"


def _return_columns(f: Figures) -> str:
    if not f.isr_expansions:
        return "not run (--no-return) | not run"
    refused = f", {f.isr_refusals} refused" if f.isr_refusals else ""
    return (
        f"{f.isr_expansion_writes:,} ({_mib(f.isr_expansion_bytes)}; "
        f"{f.isr_expansion_s:.1f} s{refused}) "
        f"| {f.preferred_writes:,} ({f.preferred_pass_s:.2f} s)"
    )


def _figures(document: dict[str, Any]) -> Figures:
    """Figures from a --json line (fields an older run wrote and this one lacks left out)."""
    return Figures(**{f.name: document[f.name] for f in fields(Figures) if f.name in document})


def _numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("local", "kube"), default="local")
    parser.add_argument("--brokers", type=_numbers, default=[10, 30, 100])
    parser.add_argument("--partitions", type=_numbers, default=[10_000, 50_000, 200_000])
    parser.add_argument("--partitions-per-topic", type=int, default=100)
    parser.add_argument("--lease-s", type=float, default=9.0)
    parser.add_argument("--controller-interval-s", type=float, default=1.0)
    parser.add_argument(
        "--no-return", action="store_true", help="stop after the failure is absorbed"
    )
    parser.add_argument("--quick", action="store_true", help="5 brokers, 1,000 partitions")
    parser.add_argument("--json", type=Path, help="append each scenario's figures here")
    parser.add_argument("--workdir", type=Path, help="where the stores live (default: a tmp dir)")
    parser.add_argument("--progress", action="store_true", help="always draw the bars")
    parser.add_argument("--table", type=Path, help="only print the table of a --json file")
    args = parser.parse_args(argv)
    if args.quick:
        args.brokers, args.partitions = [5], [1000]
        args.lease_s, args.controller_interval_s = 1.0, 0.1
    return args


def settings_of(args: argparse.Namespace) -> Settings:
    return Settings(
        args.lease_s,
        args.controller_interval_s,
        args.partitions_per_topic,
        with_return=not args.no_return,
    )


def run(args: argparse.Namespace) -> list[Figures]:
    settings = settings_of(args)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tierlog-scale-sim-"))
    workdir.mkdir(parents=True, exist_ok=True)
    track = choose_tracker(args.progress)
    stores = Stores(args.store, workdir)
    rows = []
    try:
        for brokers in args.brokers:
            for partitions in args.partitions:
                with stores.fresh() as inner:
                    figures = run_scenario(inner, args.store, brokers, partitions, settings, track)
                rows.append(figures)
                progress(table([figures]).splitlines()[-1])
                if args.json is not None:
                    with args.json.open("a") as out:
                        out.write(json.dumps(asdict(figures)) + "\n")
    finally:
        stores.stop()
    return rows


def main() -> None:
    args = parse_args()
    if args.table is not None:
        print(table([_figures(json.loads(line)) for line in args.table.open()]))
        return
    print(f"machine: {machine()}", flush=True)
    print(f"command: {' '.join(sys.argv)}", flush=True)
    rows = run(args)
    print(table(rows))


if __name__ == "__main__":
    main()
