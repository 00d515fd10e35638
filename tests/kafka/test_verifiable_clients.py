"""Kafka's own ``VerifiableProducer`` and ``VerifiableConsumer`` (Kafka 4.1.1's jars)
against three tierlog brokers replicating a topic (RF 3, ``min.insync.replicas=2``)
through their Kafka listeners, while the broker leading one of its partitions and the
group's ``__consumer_offsets`` partition is killed with SIGKILL and started again.

The producer (acks=all, idempotent) sends a fixed number of values at a bounded rate;
the consumer (a classic group, auto-commit off: a synchronous commit after each poll,
each record printed) reads at the same time. Their JSON events become a history
(``tests.support.verifiable_tools``), a read of the whole topic through tierlog's own
gRPC client ends it, and the history checker (``tests.support.history``) judges it:
every acknowledged value is at its acknowledged offset, every value the consumer was
given is there too, none is stored twice, and every commit of the group is a gap-free
prefix of what it read. The checker's eye for a lost record is shown on this very
history, doctored (and in ``tests/support/test_verifiable_tools.py``).
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from tests.interop.kafka import kafka_tools
from tests.replication.conftest import Cluster, ClusterFactory, replicated_brokers, wait_for
from tests.support.history import (
    NULL_VALUE,
    FinalRead,
    HistoryRecorder,
    Ok,
    Rule,
    check,
    load_history,
)
from tests.support.process_faults import kill_9
from tests.support.sidecars import free_port
from tests.support.verifiable_tools import (
    ToolEvent,
    committed_offsets,
    consumer_history,
    named,
    producer_history,
    tool_events,
)
from tierlog.client import AdminClient, Consumer, TopicPartition

__all__ = ["replicated_brokers"]  # the fixture, shared with tests/replication

BROKERS, PARTITIONS = 3, 3  # one partition led by each broker
TOPIC, GROUP, OFFSETS_TOPIC = "verifiable", "verifiers", "__consumer_offsets"
MESSAGES, MESSAGES_PER_S = 4000, 400  # ten seconds of sending
KILL_AFTER_ACKS = 1000
# Keys 0..KEYS-1 in turn, hashed over the partitions: every partition is written all
# along, the killed leader's too (without keys, the sticky partitioner may fill one
# partition for seconds and leave another empty).
KEYS = 100
# A killed broker's lease ends this long after its last renewal, and the controller
# elects other leaders: short for a quick failover, not so short that a renewal late on
# a loaded machine fences a live broker.
SESSION_TIMEOUT_MS = 4000
TIMEOUT_S = 90  # for each phase; the failover itself takes about one session timeout
# VerifiableProducer sets retries=0 itself; idempotence needs retries, and with them a
# send is retried across the failover until delivery.timeout.ms (120 s by default).
PRODUCER_CONFIG = "enable.idempotence=true\nretries=2147483647\n"


@dataclass
class Tool:
    """One of Kafka's Verifiable tools, running, its stdout in ``out``."""

    process: subprocess.Popen[bytes]
    out: Path

    @classmethod
    def start(cls, main_class: str, out: Path, *args: str) -> Tool:
        with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
            command = kafka_tools().command(f"org.apache.kafka.tools.{main_class}", *args)
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr
            )
        return cls(process, out)

    def events(self) -> list[ToolEvent]:
        return tool_events(self.out)

    def running_events(self) -> list[ToolEvent]:
        """Its events so far; it must not have ended."""
        stderr = self.out.with_suffix(".err")
        assert self.process.poll() is None, f"{self.out.name} ended:\n{stderr.read_text()[-4000:]}"
        return self.events()


@pytest.fixture
def tools() -> Iterator[list[Tool]]:
    started: list[Tool] = []
    yield started
    for tool in started:
        if tool.process.poll() is None:
            tool.process.kill()
            tool.process.wait()


def start_tool(tools: list[Tool], main_class: str, out: Path, *args: str) -> Tool:
    tool = Tool.start(main_class, out, *args)
    tools.append(tool)
    return tool


def start_cluster(replicated_brokers: ClusterFactory) -> tuple[Cluster, str]:
    """Three brokers, each with a Kafka listener the others advertise, and the topic."""
    ports = [free_port() for _ in range(BROKERS)]
    cluster = replicated_brokers(
        BROKERS,
        "tierlog.cluster.kafka.brokers="
        + ",".join(f"{n}@127.0.0.1:{p}" for n, p in enumerate(ports)),
        f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}",
        "offsets.topic.num.partitions=1",  # one coordinator for every group: the victim
        "group.initial.rebalance.delay.ms=0",  # one member: nobody else to wait for
        node_configs={n: [f"listeners=PLAINTEXT://127.0.0.1:{p}"] for n, p in enumerate(ports)},
    )
    with AdminClient(cluster.servers.split(",")) as admin:
        admin.create_topic(TOPIC, PARTITIONS, {"min.insync.replicas": "2"}, replication_factor=3)
    wait_for(lambda: _leaders(cluster, TOPIC) == set(range(BROKERS)), "a leader on each broker")
    return cluster, ",".join(f"127.0.0.1:{port}" for port in ports)


def _leaders(cluster: Cluster, topic: str) -> set[int]:
    return {cluster.state(topic, p).leader for p in range(PARTITIONS)}


def _led_by_another(cluster: Cluster, victim: int, topic: str, partition: int) -> bool:
    return cluster.state(topic, partition).leader not in (victim, -1)


def record_final_read(history: Path, servers: str) -> dict[int, int]:
    """Every partition read whole from its leader through tierlog's own gRPC client, up
    to its high watermark, into the history; returns those high watermarks."""
    consumer = Consumer({"bootstrap.servers": servers})
    try:
        assigned = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(assigned)
        ends = consumer.end_offsets(assigned)
        for tp in assigned:
            consumer.seek(tp, 0)
        records: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + TIMEOUT_S
        while any(consumer.position(tp) < ends[tp] for tp in assigned):
            assert time.monotonic() < deadline, "the topic was not read to its end"
            for record in consumer.poll(500):
                value = NULL_VALUE if record.value is None else record.value.decode()
                records[record.partition].append((record.offset, value))
    finally:
        consumer.close()
    with HistoryRecorder(history, "reader") as reader:
        for tp in assigned:
            reader.final_read("leader over gRPC", tp.partition, ends[tp], records[tp.partition])
    return {tp.partition: end for tp, end in ends.items()}


def _committed_all(consumer: Tool, ends: dict[int, int]) -> bool:
    committed = committed_offsets(consumer.events())
    return all(committed.get(partition, 0) >= end for partition, end in ends.items())


def _until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Whether ``condition`` came true within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_verifiable_producer_and_consumer_lose_nothing_acknowledged_when_a_leader_is_killed(
    tmp_path: Path, replicated_brokers: ClusterFactory, tools: list[Tool]
) -> None:
    cluster, bootstrap = start_cluster(replicated_brokers)
    history = tmp_path / "history"
    history.mkdir()
    producer_config = tmp_path / "producer.properties"
    producer_config.write_text(PRODUCER_CONFIG)
    consumer = start_tool(
        tools,
        "VerifiableConsumer", history / "consumer.out",
        "--bootstrap-server", bootstrap, "--topic", TOPIC, "--group-id", GROUP,
        "--reset-policy", "earliest", "--verbose",
    )  # fmt: skip
    # The group formed first: the producer's whole run then falls in the consumer's.
    wait_for(
        lambda: bool(named(consumer.running_events(), "partitions_assigned")),
        "the consumer's assignment",
        TIMEOUT_S,
    )
    producer = start_tool(
        tools,
        "VerifiableProducer", history / "producer.out",
        "--bootstrap-server", bootstrap, "--topic", TOPIC, "--acks", "-1",
        "--max-messages", str(MESSAGES), "--throughput", str(MESSAGES_PER_S),
        "--repeating-keys", str(KEYS),
        "--producer.config", str(producer_config),
    )  # fmt: skip

    # Mid-run, once the group has committed (its coordinator is loaded): kill -9 the
    # broker coordinating the group, which leads a partition of the topic too.
    wait_for(
        lambda: (
            len(named(producer.running_events(), "producer_send_success")) >= KILL_AFTER_ACKS
            and bool(committed_offsets(consumer.running_events()))
        ),
        f"{KILL_AFTER_ACKS} acknowledgements and a commit",
        TIMEOUT_S,
    )
    victim = cluster.state(OFFSETS_TOPIC).leader
    led = [p for p in range(PARTITIONS) if cluster.state(TOPIC, p).leader == victim]
    assert led, f"broker {victim} leads a partition of {TOPIC}"
    with HistoryRecorder(history, "nemesis") as nemesis:
        kill_9(cluster.broker(victim).process.pid)
        nemesis.fault("kill -9", f"broker-{victim}")
    cluster.broker(victim).process.wait()
    for topic, partition in [(OFFSETS_TOPIC, 0)] + [(TOPIC, p) for p in led]:
        moved = partial(_led_by_another, cluster, victim, topic, partition)
        wait_for(moved, f"a new leader of {topic}-{partition}", TIMEOUT_S)
    cluster.broker(victim).start()

    assert producer.process.wait(timeout=TIMEOUT_S) == 0
    wait_for(
        lambda: all(len(cluster.state(TOPIC, p).isr) == BROKERS for p in range(PARTITIONS)),
        "the restarted broker back in every ISR",
        TIMEOUT_S,
    )
    ends = record_final_read(history, cluster.servers)
    caught_up = _until(partial(_committed_all, consumer, ends), TIMEOUT_S)
    consumer.process.send_signal(signal.SIGTERM)  # its shutdown hook closes the consumer
    consumer.process.wait(timeout=TIMEOUT_S)

    produced = producer.events()
    consumed = consumer.events()
    for worker, events in [
        ("producer", producer_history(produced, "producer", TOPIC, MESSAGES)),
        ("consumer", consumer_history(consumed, "consumer", TOPIC, GROUP)),
    ]:
        with HistoryRecorder(history, worker) as recorder:
            for event in events:
                recorder.record(event)
    events = load_history(history)
    violations = check(events)
    assert not violations, "\n".join(map(str, violations))
    # Every send was acknowledged (retried across the failover), and the group read and
    # committed the whole topic.
    [summary] = named(produced, "tool_data")
    assert summary["acked"] == summary["sent"] == MESSAGES
    assert sum(isinstance(event, Ok) for event in events) == MESSAGES
    assert sum(ends.values()) == MESSAGES
    assert all(ends.values()), ends
    assert caught_up, f"the group committed {committed_offsets(consumed)} of {ends}"
    assert consumed[-1]["name"] == "shutdown_complete"
    # As Kafka's own system test of a broker failure under this consumer asserts: the
    # coordinator's failover rebalanced nothing, so no record was given twice.
    assert len(named(consumed, "partitions_assigned")) == 1
    assert len(named(consumed, "record_data")) == MESSAGES
    print(f"\n{MESSAGES} acknowledged and read once, broker {victim} killed")

    # The same history with one acknowledged record gone from the topic fails the check.
    lost = next(e for e in events if isinstance(e, Ok) and e.partition == led[0])
    doctored = [
        dataclasses.replace(e, records=tuple(r for r in e.records if r[0] != lost.offset))
        if isinstance(e, FinalRead) and e.partition == lost.partition
        else e
        for e in events
    ]
    assert Rule.ACKNOWLEDGED_KEPT in [violation.rule for violation in check(doctored)]
