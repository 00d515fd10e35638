"""Classic consumer groups (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) through the Kafka
listener, with real clients: kafka-python 3 consumers subscribe with a ``group_id`` and
split a topic's partitions, a consumer closing hands its partitions over at once, one
killed with SIGKILL has them moved after its ``session.timeout.ms``, and their commits
outlive them; Kafka's own Java console consumer joins with ``--group`` and
``kafka-consumer-groups`` lists, describes and deletes the groups; a broker killed and
restarted takes its groups back from the log; and every version served, on a connection
of the test's own."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode

from tests.kafka.conftest import KafkaSidecar, run_java, start_kafka_sidecar, unique_name
from tests.kafka.wire import KafkaWire
from tests.support.sidecars import Sidecars

PARTITIONS = 4
SESSION_MS = 3000  # the consumers' session.timeout.ms (the broker's minimum is lower)
HEARTBEAT_MS = 300
CONFIGS = (
    "offsets.topic.num.partitions=3",
    "group.initial.rebalance.delay.ms=100",
    "group.min.session.timeout.ms=1000",
)
WAIT_S = 60  # how long a test waits for what must happen (a bound, not a measurement)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        sidecar = start_kafka_sidecar(
            started, tmp_path_factory.mktemp("classic") / "data", *CONFIGS
        )
        sidecar.load_offsets_topic(3)
        yield sidecar


def _topic(broker: KafkaSidecar, records_per_partition: int = 5) -> str:
    name = unique_name("t")
    broker.create_topic(name, partitions=PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=broker.kafka_address, acks="all")
    for partition in range(PARTITIONS):
        for i in range(records_per_partition):
            producer.send(name, f"{partition}-{i}".encode(), partition=partition)
    producer.flush()
    producer.close()
    return name


def _consumer(broker: KafkaSidecar, group: str, client_id: str) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=broker.kafka_address,
        group_id=group,
        client_id=client_id,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )


class Polling:
    """A kafka-python consumer polled on its own thread (its heartbeats ride on polls),
    remembering what it was assigned and read."""

    def __init__(self, consumer: KafkaConsumer, topic: str) -> None:
        self.consumer = consumer
        self.assigned: set[int] = set()
        self.read: list[tuple[int, int]] = []  # (partition, offset)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            polled = self.consumer.poll(timeout_ms=100)
            with self._lock:
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
                for records in polled.values():
                    self.read.extend((r.partition, r.offset) for r in records)
                if polled:
                    self.consumer.commit()

    def partitions(self) -> set[int]:
        with self._lock:
            return set(self.assigned)

    def close(self) -> None:
        """Stop polling and leave the group (LeaveGroup)."""
        self._stop.set()
        self._thread.join(WAIT_S)
        self.consumer.close()


def _until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> float:
    """Wait for ``condition``; the seconds it took."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"timed out waiting for {what}"
        time.sleep(0.05)
    return time.monotonic() - started


def test_two_consumers_split_the_partitions_and_one_closing_hands_its_over(
    broker: KafkaSidecar,
) -> None:
    topic, group = _topic(broker), unique_name("g")
    first = Polling(_consumer(broker, group, "first"), topic)
    second: Polling | None = None
    try:
        _until(lambda: first.partitions() == set(range(PARTITIONS)), "the first member")
        second = Polling(_consumer(broker, group, "second"), topic)
        _until(
            lambda: len(first.partitions()) == len(second.partitions()) == PARTITIONS // 2,
            "the two members to split the partitions",
        )
        assert first.partitions() | second.partitions() == set(range(PARTITIONS))
        second.close()
        _until(lambda: first.partitions() == set(range(PARTITIONS)), "the partitions back")
        # Every record read once by one member or the other, and committed.
        _until(lambda: len(first.read) + len(second.read) >= 5 * PARTITIONS, "every record")
    finally:
        first.close()
        if second is not None:
            second.close()
    assert sorted(first.read + second.read) == [(p, o) for p in range(PARTITIONS) for o in range(5)]
    # The commits outlive the members: a newcomer starts where they stopped.
    late = _consumer(broker, group, "late")
    committed = {p: late.committed(KafkaTopicPartition(topic, p)) for p in range(PARTITIONS)}
    late.close()
    assert committed == dict.fromkeys(range(PARTITIONS), 5)


_KILLED_CONSUMER = """
import sys, time
from kafka import KafkaConsumer
bootstrap, group, topic, session_ms, heartbeat_ms = sys.argv[1:]
consumer = KafkaConsumer(
    bootstrap_servers=bootstrap, group_id=group, client_id="doomed",
    session_timeout_ms=int(session_ms), heartbeat_interval_ms=int(heartbeat_ms),
    auto_offset_reset="earliest", enable_auto_commit=False,
)
consumer.subscribe([topic])
said = set()
while True:
    consumer.poll(timeout_ms=100)
    assigned = sorted(tp.partition for tp in consumer.assignment())
    if assigned and set(assigned) != said:
        said = set(assigned)
        print("assigned", *assigned, flush=True)
"""


def test_a_killed_member_s_partitions_move_after_its_session_timeout(
    broker: KafkaSidecar,
) -> None:
    topic, group = _topic(broker), unique_name("g")
    survivor = Polling(_consumer(broker, group, "survivor"), topic)
    timeouts = [str(SESSION_MS), str(HEARTBEAT_MS)]
    doomed = subprocess.Popen(
        [sys.executable, "-c", _KILLED_CONSUMER, broker.kafka_address, group, topic, *timeouts],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert doomed.stdout is not None
        line = doomed.stdout.readline()  # blocks until it is assigned (or dies)
        assert line.startswith("assigned"), f"the doomed consumer said {line!r}"
        _until(lambda: len(survivor.partitions()) == PARTITIONS // 2, "the split")
        doomed.kill()  # SIGKILL: no LeaveGroup, its session has to run out
        doomed.wait()
        took_s = _until(lambda: survivor.partitions() == set(range(PARTITIONS)), "the move")
        # Its session ends SESSION_MS after its last heartbeat; the survivor then learns
        # of the rebalance at its next heartbeat and rejoins alone.
        assert took_s < (SESSION_MS + 2 * HEARTBEAT_MS) / 1000 + 2, took_s
    finally:
        doomed.kill()
        doomed.wait()
        survivor.close()


_GROUPS_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def _rows(table: str, group: str, columns: tuple[int, ...] | None = None) -> list[list[str]]:
    """The lines of ``kafka-consumer-groups``' table about ``group``, split on blanks
    (only ``columns`` of each, if given)."""
    rows = [line.split() for line in table.splitlines() if line.startswith(group + " ")]
    return rows if columns is None else [[row[i] for i in columns] for row in rows]


def test_java_console_consumer_with_a_group_and_kafka_consumer_groups(
    broker: KafkaSidecar,
) -> None:
    topic, group = _topic(broker, records_per_partition=3), unique_name("java")
    bootstrap = broker.kafka_address
    printed = run_java(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server", bootstrap,
        "--topic", topic,
        "--group", group,
        "--from-beginning",
        "--max-messages", str(3 * PARTITIONS),
    )  # fmt: skip
    assert sorted(printed.splitlines()) == sorted(
        f"{p}-{i}" for p in range(PARTITIONS) for i in range(3)
    )

    listed = run_java(_GROUPS_COMMAND, "--bootstrap-server", bootstrap, "--list")
    assert group in listed.split()
    member = Polling(_consumer(broker, group, "python-member"), topic)
    try:
        _until(lambda: member.partitions() == set(range(PARTITIONS)), "the python member")
        described = run_java(
            _GROUPS_COMMAND, "--bootstrap-server", bootstrap, "--describe", "--group", group
        )
        rows = _rows(described, group)
        # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
        assert sorted((r[1], r[2], r[3], r[4], r[5]) for r in rows) == [
            (topic, str(p), "3", "3", "0") for p in range(PARTITIONS)
        ]
        assert {r[8] for r in rows} == {"python-member"}
        members = run_java(
            _GROUPS_COMMAND,
            "--bootstrap-server", bootstrap,
            "--describe", "--members", "--group", group,
        )  # fmt: skip
        assert "python-member" in members
    finally:
        member.close()
    state = [_GROUPS_COMMAND, "--bootstrap-server", bootstrap, "--describe", "--state"]
    # GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS; the strategy is blank
    # once the group is empty.
    _until(
        lambda: (
            [group, "Empty", "0"] in _rows(run_java(*state, "--group", group), group, (0, -2, -1))
        ),
        "the group to empty",
    )
    deleted = run_java(
        _GROUPS_COMMAND, "--bootstrap-server", bootstrap, "--delete", "--group", group
    )
    assert "successful" in deleted
    assert group not in run_java(_GROUPS_COMMAND, "--bootstrap-server", bootstrap, "--list").split()


JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42


def _join(wire: KafkaWire, version: int, group: str, member_id: str = "", **more: Any) -> Any:
    fields = {
        "group_id": group,
        "session_timeout": SESSION_MS,
        "rebalance_timeout": SESSION_MS,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"meta"}],
        "reason": None,
        **more,
    }
    return wire.call(JOIN_GROUP, version, fields)


def _member(wire: KafkaWire, version: int, group: str) -> str:
    """A member that joined ``group`` alone at JoinGroup ``version`` (KIP-394's round
    first from v4): its id."""
    joined = _join(wire, version, group)
    if version >= 4:
        assert joined.error_code == ErrorCode.member_id_required and joined.member_id
        joined = _join(wire, version, group, joined.member_id)
    assert joined.error_code == ErrorCode.none
    assert (joined.generation_id, joined.leader, joined.protocol_name) == (
        1,
        joined.member_id,
        "range",
    )
    assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, b"meta")]
    return str(joined.member_id)


@pytest.mark.parametrize(
    ("join_v", "sync_v", "heartbeat_v", "leave_v"),
    [
        (2, 1, 1, 1),
        (3, 2, 2, 2),
        (4, 2, 2, 2),
        (5, 3, 3, 3),
        (6, 4, 4, 4),
        (7, 5, 4, 5),
        (9, 5, 4, 5),
    ],
)
def test_join_sync_heartbeat_and_leave_at_every_version(
    broker: KafkaSidecar, join_v: int, sync_v: int, heartbeat_v: int, leave_v: int
) -> None:
    group = unique_name("v")
    wire = KafkaWire(broker.kafka_port)
    try:
        member = _member(wire, join_v, group)
        synced = wire.call(
            SYNC_GROUP,
            sync_v,
            {
                "group_id": group,
                "generation_id": 1,
                "member_id": member,
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": [{"member_id": member, "assignment": b"mine"}],
            },
        )
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"mine")
        beat = {"group_id": group, "member_id": member, "group_instance_id": None}
        assert wire.call(HEARTBEAT, heartbeat_v, {**beat, "generation_id": 1}).error_code == (
            ErrorCode.none
        )
        stale = wire.call(HEARTBEAT, heartbeat_v, {**beat, "generation_id": 0})
        assert stale.error_code == ErrorCode.illegal_generation
        other = _join(wire, join_v, group, protocol_type="connect")
        assert other.error_code == ErrorCode.inconsistent_group_protocol
        leaving = {"member_id": member, "group_instance_id": None, "reason": None}
        left = wire.call(LEAVE_GROUP, leave_v, {"group_id": group, **leaving, "members": [leaving]})
        assert left.error_code == ErrorCode.none
        if leave_v >= 3:
            assert [m.error_code for m in left.members] == [ErrorCode.none]
        gone = wire.call(HEARTBEAT, heartbeat_v, {**beat, "generation_id": 1})
        assert gone.error_code == ErrorCode.unknown_member_id
    finally:
        wire.close()


def test_describe_list_and_delete_groups_at_every_version(broker: KafkaSidecar) -> None:
    group = unique_name("d")
    wire = KafkaWire(broker.kafka_port)
    try:
        member = _member(wire, 9, group)
        for version in range(1, 7):
            described = wire.call(
                DESCRIBE_GROUPS,
                version,
                {"groups": [group, "nobody"], "include_authorized_operations": False},
            ).groups
            unknown = ErrorCode.group_id_not_found if version >= 6 else ErrorCode.none
            assert [(g.group_id, g.error_code, g.group_state) for g in described] == [
                (group, ErrorCode.none, "CompletingRebalance"),
                ("nobody", unknown, "Dead"),
            ]
            if version >= 6:
                assert described[1].error_message == "Group nobody not found."
            assert described[0].protocol_type == "consumer"
            assert [m.member_id for m in described[0].members] == [member]
        for version in range(1, 6):
            listed = wire.call(LIST_GROUPS, version, {"states_filter": [], "types_filter": []})
            assert (group, "consumer") in [(g.group_id, g.protocol_type) for g in listed.groups]
        by_state = wire.call(LIST_GROUPS, 4, {"states_filter": ["Stable"]})
        assert group not in [g.group_id for g in by_state.groups]
        by_type = wire.call(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["classic"]})
        assert (group, "classic") in [(g.group_id, g.group_type) for g in by_type.groups]
        for version in range(3):
            refused = wire.call(DELETE_GROUPS, version, {"groups_names": [group, "nobody"]})
            assert [r.error_code for r in refused.results] == [
                ErrorCode.non_empty_group,
                ErrorCode.group_id_not_found,
            ]
        leaving = {"member_id": member, "group_instance_id": None, "reason": None}
        wire.call(LEAVE_GROUP, 5, {"group_id": group, "members": [leaving]})
        deleted = wire.call(DELETE_GROUPS, 2, {"groups_names": [group]})
        assert [r.error_code for r in deleted.results] == [ErrorCode.none]
        after = wire.call(
            DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}
        ).groups
        assert after[0].group_state == "Dead"
    finally:
        wire.close()


def _described(broker: KafkaSidecar, group: str) -> Any:
    wire = KafkaWire(broker.kafka_port)
    try:
        fields = {"groups": [group], "include_authorized_operations": False}
        return wire.call(DESCRIBE_GROUPS, 5, fields).groups[0]
    finally:
        wire.close()


def test_a_broker_killed_and_restarted_loads_the_group_at_its_generation(
    sidecars: Sidecars, tmp_path: Path
) -> None:
    broker = start_kafka_sidecar(sidecars, tmp_path / "data", *CONFIGS)
    broker.load_offsets_topic(3)
    topic, group = _topic(broker), unique_name("r")
    member = Polling(_consumer(broker, group, "steady"), topic)
    try:
        _until(lambda: len(member.read) == 5 * PARTITIONS, "every record")
        before = _described(broker, group)
        broker.kill()  # SIGKILL: the group lives on only in __consumer_offsets
        broker.start()
        producer = KafkaProducer(bootstrap_servers=broker.kafka_address, acks="all")
        producer.send(topic, b"after", partition=0).get(WAIT_S)
        producer.close()
        _until(lambda: len(member.read) == 5 * PARTITIONS + 1, "the record after the restart")
        after = _described(broker, group)
    finally:
        member.close()
    assert (before.group_state, after.group_state) == ("Stable", "Stable")
    assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
    assert [m.member_assignment for m in after.members] == [
        m.member_assignment for m in before.members
    ]
    assert member.read[-1] == (0, 5)  # from the committed offset on, nothing read twice
