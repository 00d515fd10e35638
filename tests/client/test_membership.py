"""Consumers in a group (KIP-848) against a real sidecar: they split a topic's
partitions, a joining consumer moves each partition at most once and never to two
owners, a consumer killed with ``kill -9`` (a process of its own) loses its partitions
within the session timeout, and a checker over everything consumed proves no record
was skipped and duplicates came only after an uncommitted position."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.process_faults import kill_9, paused
from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.client import Consumer, Producer, TopicPartition
from tierlog.client.groups import ConsumerGroups, GroupClient

from .conftest import SidecarStarter, create_topic
from .sidecars import LiveSidecar

TOPIC = "orders"
GROUP = "billing"
SESSION_MS = 3000
CONFIGS = (
    "offsets.topic.num.partitions=1",
    f"group.consumer.session.timeout.ms={SESSION_MS}",
    "group.consumer.heartbeat.interval.ms=200",
)
WORKER = Path(__file__).with_name("group_worker.py")


@pytest.fixture
def sidecar(sidecars: SidecarStarter) -> LiveSidecar:
    started = sidecars("data", *CONFIGS)
    create_topic(started.address, TOPIC, partitions=6)
    return started


def _produce(address: str, per_partition: int, start: int = 0) -> None:
    with Producer({"bootstrap.servers": address}) as producer:
        for partition in range(6):
            for seq in range(start, start + per_partition):
                producer.send(TOPIC, b"p%d-%d" % (partition, seq), partition=partition)
        producer.flush()


@dataclass
class Member:
    """An in-process consumer and what its callbacks saw."""

    consumer: Consumer
    owned: set[int] = field(default_factory=set)
    gained: list[int] = field(default_factory=list)
    revoked: list[int] = field(default_factory=list)

    def subscribe(self) -> None:
        def on_assign(partitions: list[TopicPartition]) -> None:
            self.gained += [tp.partition for tp in partitions]
            self.owned |= {tp.partition for tp in partitions}

        def on_revoke(partitions: list[TopicPartition]) -> None:
            self.revoked += [tp.partition for tp in partitions]
            self.owned -= {tp.partition for tp in partitions}

        self.consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)


def _member(address: str, name: str, instance_id: str = "") -> Member:
    consumer = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": GROUP,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "group.instance.id": instance_id,
        }
    )
    return Member(consumer)


def _poll_until_split(members: list[Member], sizes: list[int], timeout_s: float = 20) -> None:
    """Poll every member in turn until they own ``sizes`` partitions; at every step no
    partition is owned by two of them."""
    deadline = time.monotonic() + timeout_s
    while True:
        for member in members:
            member.consumer.poll(50)
            owned = [p for m in members for p in m.owned]
            assert len(owned) == len(set(owned)), f"a partition with two owners: {owned}"
            assert member.owned == {tp.partition for tp in member.consumer.assignment()}
        if sorted(len(m.owned) for m in members) == sorted(sizes):
            return
        assert time.monotonic() < deadline, [sorted(m.owned) for m in members]


def test_two_consumers_split_six_partitions_and_a_third_moves_each_once(
    sidecar: LiveSidecar,
) -> None:
    _produce(sidecar.address, 5)
    a, b = _member(sidecar.address, "a"), _member(sidecar.address, "b")
    a.subscribe()
    b.subscribe()
    try:
        _poll_until_split([a, b], [3, 3])
        assert a.owned | b.owned == set(range(6))
        c = _member(sidecar.address, "c")
        c.subscribe()
        before = {"a": set(a.owned), "b": set(b.owned)}
        for member in (a, b):
            member.gained.clear()
            member.revoked.clear()
        _poll_until_split([a, b, c], [2, 2, 2])
        assert a.gained == [] and b.gained == []
        moved = a.revoked + b.revoked
        assert sorted(moved) == sorted(c.gained) and len(set(moved)) == len(moved) == 2
        assert a.owned <= before["a"] and b.owned <= before["b"]
        groups = ConsumerGroups(a.consumer.cluster)
        described = groups.group(GROUP).describe()
        assert sorted(m.client_id for m in described.members) == ["a", "b", "c"]
        c.consumer.close()  # leaves: its two partitions go back to a and b
        _poll_until_split([a, b], [3, 3])
    finally:
        a.consumer.close()
        b.consumer.close()
    assert (
        ConsumerGroups(Consumer({"bootstrap.servers": sidecar.address}).cluster)
        .group(GROUP)
        .describe()
        .state
        == "Empty"
    )


def test_a_pattern_subscription_takes_topics_made_later(sidecar: LiveSidecar) -> None:
    member = _member(sidecar.address, "a")
    member.consumer.subscribe(re.compile(r"orders(-.*)?"))
    try:
        deadline = time.monotonic() + 20
        while len(member.consumer.assignment()) != 6:
            member.consumer.poll(50)
            assert time.monotonic() < deadline
        create_topic(sidecar.address, "orders-eu", partitions=2)
        create_topic(sidecar.address, "audit", partitions=1)
        while len(member.consumer.assignment()) != 8:
            member.consumer.poll(50)
            assert time.monotonic() < deadline, member.consumer.assignment()
        assert {tp.topic for tp in member.consumer.assignment()} == {"orders", "orders-eu"}
    finally:
        member.consumer.close()


def test_a_static_member_restarted_within_its_session_gets_its_partitions_back(
    sidecar: LiveSidecar,
) -> None:
    """``group.instance.id``: closing leaves with epoch -2, so its partitions wait for it
    (the other member is not given them); the next consumer with that instance id gets
    them at once, without a rebalance of the other."""
    a = _member(sidecar.address, "a", instance_id="pod-0")
    b = _member(sidecar.address, "b", instance_id="pod-1")
    a.subscribe()
    b.subscribe()
    try:
        _poll_until_split([a, b], [3, 3])
        kept = set(a.owned)
        b.gained.clear()
        b.revoked.clear()
        a.consumer.close()
        again = _member(sidecar.address, "a2", instance_id="pod-0")
        again.subscribe()
        _poll_until_split([again, b], [3, 3])
        assert again.owned == kept and b.gained == b.revoked == []
        described = ConsumerGroups(b.consumer.cluster).group(GROUP).describe()
        assert sorted(m.instance_id for m in described.members) == ["pod-0", "pod-1"]
        again.consumer.close()
    finally:
        b.consumer.close()


def test_the_group_survives_a_kill_9_of_its_coordinator(sidecars: SidecarStarter) -> None:
    """The sidecar (coordinator and log) is killed and started again under two live
    members, within their session (Kafka's 45 s): they keep their member ids, epochs and
    partitions (nothing revoked or lost), and go on consuming."""
    sidecar = sidecars("data", "offsets.topic.num.partitions=1")
    create_topic(sidecar.address, TOPIC, partitions=6)
    _produce(sidecar.address, 5)
    a, b = _member(sidecar.address, "a"), _member(sidecar.address, "b")
    a.subscribe()
    b.subscribe()
    try:
        _poll_until_split([a, b], [3, 3])
        owned = (set(a.owned), set(b.owned))
        before = [m.consumer.group_metadata() for m in (a, b)]
        assert all(m.member_id and m.generation_id > 0 for m in before)
        a.revoked.clear()
        b.revoked.clear()
        sidecar.kill()
        sidecar.start()
        _produce(sidecar.address, 5, start=5)
        last: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while sorted(last.items()) != [(p, 9) for p in range(6)]:
            for member in (a, b):
                for record in member.consumer.poll(50):
                    last[record.partition] = max(last.get(record.partition, -1), record.offset)
            assert time.monotonic() < deadline, f"consumed only up to {last}"
        assert (a.owned, b.owned) == owned and a.revoked == b.revoked == []
        assert [m.consumer.group_metadata() for m in (a, b)] == before
        described = ConsumerGroups(a.consumer.cluster).group(GROUP).describe()
        assert described.state == "Stable" and len(described.members) == 2
    finally:
        a.consumer.close()
        b.consumer.close()


class HeldAnswer:
    """``GroupClient.heartbeat`` of the member ``client_id`` as a pause that lands while
    a beat is in flight: once ``hold`` is set, the next beat's answer (the coordinator
    answers at once, the member still in its session) waits until ``wake``, as in a
    stopped process's socket; the beat after it waits until ``resume``, so the member
    learns nothing more meanwhile."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, client_id: str) -> None:
        self.hold = threading.Event()
        self.answered, self.wake = threading.Event(), threading.Event()
        self.next_beat, self.resume = threading.Event(), threading.Event()
        real = GroupClient.heartbeat

        def heartbeat(
            group: GroupClient, request: pb.ConsumerGroupHeartbeatRequest
        ) -> pb.ConsumerGroupHeartbeatResponse:
            if request.client_id != client_id or not self.hold.is_set():
                return real(group, request)
            if not self.answered.is_set():
                response = real(group, request)
                self.answered.set()
                self.wake.wait()
                return response
            self.next_beat.set()
            self.resume.wait()
            return real(group, request)

        monkeypatch.setattr(GroupClient, "heartbeat", heartbeat)

    def release(self) -> None:
        self.hold.clear()
        self.wake.set()
        self.resume.set()


def test_an_answer_read_after_a_pause_does_not_renew_the_session(
    sidecar: LiveSidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving of ``test_a_paused_consumer_loses_its_partitions_and_rejoins``
    when the pause catches a beat in flight: its answer, read on waking, is as old as
    the beat. The session is counted from when the beat was sent, so the woken member
    still finds it over before it returns a record: none of the partitions it lost
    (which it would then commit as a zombie: UNKNOWN_MEMBER_ID)."""
    held = HeldAnswer(monkeypatch, "a")
    a = _member(sidecar.address, "a")
    lost: list[int] = []
    a.consumer.subscribe([TOPIC], on_lost=lambda tps: lost.extend(tp.partition for tp in tps))
    b = _member(sidecar.address, "b")
    try:
        deadline = time.monotonic() + 20
        while len(a.consumer.assignment()) != 6:
            a.consumer.poll(50)
            assert time.monotonic() < deadline
        held.hold.set()
        assert held.answered.wait(5)  # "paused" with the answer unread
        b.subscribe()
        _poll_until_split([b], [6])  # the session expired; the partitions moved
        _produce(sidecar.address, 5)
        held.wake.set()
        assert held.next_beat.wait(5)  # the old answer was read first
        assert a.consumer.poll(1000) == []
        assert sorted(lost) == list(range(6)) and a.consumer.assignment() == []
    finally:
        held.release()
        a.consumer.close()
        b.consumer.close()


# -- processes, kill -9 and the checker ------------------------------------------------


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    out: Path

    def lines(self) -> list[list[str]]:
        return [line.split() for line in self.out.read_text().splitlines() if line]

    def owned(self) -> set[int]:
        owned: set[int] = set()
        for line in self.lines():
            if line[0] == "A":
                owned |= set(map(int, line[1:]))
            elif line[0] == "V":
                owned -= set(map(int, line[1:]))
        return owned


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    (tmp_path / "done").touch()
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
        worker.process.wait(10)


def _start_worker(address: str, tmp_path: Path, name: str, started: list[Worker]) -> Worker:
    out = tmp_path / f"{name}.out"
    out.touch()
    process = subprocess.Popen(
        [sys.executable, str(WORKER), address, GROUP, TOPIC, str(out), str(tmp_path / "done")]
    )
    worker = Worker(process, out)
    started.append(worker)
    return worker


def _wait_for(condition: object, what: str, timeout_s: float = 30) -> float:
    """Seconds until ``condition()`` held (looked at every 50 ms)."""
    assert callable(condition)
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"timed out waiting: {what}"
        time.sleep(0.05)  # the workers run on their own: look again
    return time.monotonic() - started


def _consumed(worker: Worker) -> dict[int, list[int]]:
    seen: dict[int, list[int]] = {}
    for line in worker.lines():
        if line[0] == "R":
            seen.setdefault(int(line[1]), []).append(int(line[2]))
    return seen


def _read_to(last: int, partitions: Iterable[int], *workers: Worker) -> bool:
    """Whether each partition was read up to offset ``last`` by one of ``workers``."""
    consumed = [_consumed(worker) for worker in workers]
    return all(max(o for seen in consumed for o in seen.get(p, [-1])) == last for p in partitions)


def _committed_to(position: int, partitions: Iterable[int], *workers: Worker) -> bool:
    """Whether each partition's commit reached ``position``, acknowledged to one of
    ``workers``."""
    committed: dict[int, int] = {}
    for worker in workers:
        for line in worker.lines():
            if line[0] == "C":
                partition, offset = int(line[1]), int(line[2])
                committed[partition] = max(committed.get(partition, -1), offset)
    return all(committed.get(p, -1) == position for p in partitions)


@dataclass
class Ownership:
    """One worker's stretch of owning a partition: what it read, what it committed."""

    reads: list[int] = field(default_factory=list)
    committed: int | None = None


def _ownerships(worker: Worker) -> dict[int, list[Ownership]]:
    """Per partition, the worker's stretches of ownership, from its lines in order."""
    stretches: dict[int, list[Ownership]] = {}
    for line in worker.lines():
        kind, args = line[0], line[1:]
        if kind == "A":
            for partition in map(int, args):
                stretches.setdefault(partition, []).append(Ownership())
        elif kind == "R":
            stretches[int(args[0])][-1].reads.append(int(args[1]))
        elif kind == "C":
            stretches[int(args[0])][-1].committed = int(args[1])
    return stretches


def check_at_least_once(workers: list[Worker], end_offset: int) -> None:
    """Every record of every partition below ``end_offset`` was read, each owner read
    its records in order, and a record was read again only from the last commit its
    previous owner made on (what was not committed yet): ordered by where they began,
    each stretch begins no later than one past what was read before it (nothing
    skipped) and no earlier than the last commit before it (duplicates only after an
    uncommitted position)."""
    for partition in range(6):
        stretches = [
            stretch
            for worker in workers
            for stretch in _ownerships(worker).get(partition, [])
            if stretch.reads
        ]
        stretches.sort(key=lambda stretch: stretch.reads[0])
        read_up_to, committed = 0, 0
        for stretch in stretches:
            first = stretch.reads[0]
            assert stretch.reads == list(range(first, first + len(stretch.reads)))
            assert first <= read_up_to, f"partition {partition}: skipped {read_up_to}..{first}"
            assert first >= committed, f"partition {partition}: re-read {first} < {committed}"
            read_up_to = max(read_up_to, stretch.reads[-1] + 1)
            if stretch.committed is not None:
                committed = max(committed, stretch.committed)
        assert read_up_to == end_offset, f"partition {partition} read up to {read_up_to}"


def test_a_killed_consumers_partitions_move_within_the_session_and_nothing_is_skipped(
    sidecar: LiveSidecar, tmp_path: Path, workers: list[Worker]
) -> None:
    per_partition = 50
    _produce(sidecar.address, per_partition)
    first = _start_worker(sidecar.address, tmp_path, "first", workers)
    second = _start_worker(sidecar.address, tmp_path, "second", workers)
    _wait_for(lambda: len(first.owned()) == 3 and len(second.owned()) == 3, "a 3/3 split")
    # Read by either: the worker that joined first may have read the other's share alone.
    _wait_for(
        lambda: _read_to(per_partition - 1, first.owned(), first, second),
        "the first's partitions read",
    )
    kill_9(first.process.pid)
    first.process.wait(10)
    took_s = _wait_for(lambda: len(second.owned()) == 6, "the second owns everything")
    assert took_s < SESSION_MS / 1000 + 3, f"the partitions moved after {took_s:.1f} s"

    _produce(sidecar.address, per_partition, start=per_partition)
    total = 2 * per_partition
    _wait_for(
        lambda: _read_to(total - 1, range(6), second),
        "the second reads to the end",
    )
    # A clean stop: the second commits what it read and leaves; a third resumes there.
    (tmp_path / "done").touch()
    assert second.process.wait(30) == 0
    (tmp_path / "done").unlink()
    _produce(sidecar.address, 10, start=total)
    third = _start_worker(sidecar.address, tmp_path, "third", workers)
    _wait_for(
        lambda: _read_to(total + 9, range(6), third),
        "the third reads the new records",
    )
    assert {p: min(offsets) for p, offsets in _consumed(third).items()} == dict.fromkeys(
        range(6), total
    )

    check_at_least_once([first, second, third], total + 10)


def test_a_paused_consumer_loses_its_partitions_and_rejoins(
    sidecar: LiveSidecar, tmp_path: Path, workers: list[Worker]
) -> None:
    """SIGSTOP past the session: the coordinator gives its partitions to the other; on
    SIGCONT it finds itself out of the group, drops them unread (its callbacks say so)
    and joins again, taking back its share; everything is read at least once."""
    _produce(sidecar.address, 20)
    first = _start_worker(sidecar.address, tmp_path, "first", workers)
    second = _start_worker(sidecar.address, tmp_path, "second", workers)
    _wait_for(lambda: len(first.owned()) == 3 and len(second.owned()) == 3, "a 3/3 split")
    # The first's partitions read to the end and committed, by either: whichever worker
    # joined first owned all six alone for a moment, and may have read and committed the
    # other's share too (then the other starts at the commit and reads nothing of it).
    # Committed, not only read: a worker writes its records before it commits them, and
    # a commit the pause caught in flight is refused once the session is over, by any
    # consumer (Kafka's raises CommitFailedException), so the pause must find none.
    _wait_for(
        lambda: _committed_to(20, first.owned(), first, second),
        "the first's partitions read and committed",
    )
    with paused(first.process.pid):
        _wait_for(lambda: len(second.owned()) == 6, "the second owns everything")
        _produce(sidecar.address, 20, start=20)
    _wait_for(lambda: len(first.owned()) == 3 and len(second.owned()) == 3, "3/3 again")
    _produce(sidecar.address, 20, start=40)
    _wait_for(lambda: _read_to(59, range(6), first, second), "everything read")
    check_at_least_once([first, second], 60)
    # Woken up, it returned no record of the partitions it had lost: every commit it
    # tried was of partitions it still owned (a zombie's would be UNKNOWN_MEMBER_ID).
    assert [line for line in first.lines() if line[0] == "F"] == []
