"""The demo's consumer group: two consumers share a topic, commit half-way, and after the
sidecar's restart one consumer of the same group resumes exactly where they left off.

Both steps talk to the sidecar only through ``tierlog.client``, as ``demo`` does; what
they print is computed from what the consumers received and the group committed, and
checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tierlog.cli.local_sidecar import LocalSidecar
from tierlog.client import AdminClient, Consumer, Producer, TopicPartition
from tierlog.client.cluster import Cluster
from tierlog.client.groups import GroupClient, OffsetAndMetadata

__all__ = ["GROUP_SIDECAR_CONFIGS", "resume_after_restart", "share_a_topic"]

GROUP_TOPIC = "demo-orders"
GROUP = "demo-readers"
PARTITIONS = 4
RECORDS_PER_PARTITION = 100
# Heartbeats every 200 ms (Kafka's default is 5 s): the demo's rebalance takes a second.
GROUP_SIDECAR_CONFIGS = ("group.consumer.heartbeat.interval.ms=200",)
_SETTLE_S = 30.0  # how long the consumers may take to join and split the partitions

Say = Callable[[str], None]
Check = Callable[[bool, str], None]
_ALL = [TopicPartition(GROUP_TOPIC, p) for p in range(PARTITIONS)]


def share_a_topic(sidecar: LocalSidecar, step: int, say: Say, check: Check) -> None:
    """Two members split the topic's partitions, read this run's records and commit the
    first half of each partition; they leave the group on close."""
    server = sidecar.address
    say(f"{step}. A consumer group: {GROUP} reads topic {GROUP_TOPIC} ({PARTITIONS} partitions)")
    starts = _create(server)
    # The group starts at this run's records, as `consumer-groups --reset-offsets
    # --to-latest --execute` before the run would set it (an earlier run left commits).
    _commit(server, starts)
    config = {"bootstrap.servers": server, "group.id": GROUP, "enable.auto.commit": "false"}
    with Consumer(config) as first, Consumer(config) as second:
        members = (first, second)
        for member in members:
            member.subscribe(GROUP_TOPIC)
        _wait_for_the_split(members, check)
        _produce(server, say)
        received = _read(members, check)
        for name, member in zip(("first", "second"), members, strict=True):
            owned = sorted(tp.partition for tp in member.assignment())
            count = sum(received[tp] for tp in member.assignment())
            say(f"   the {name} consumer owns partitions {owned} and read {count} records")
        halfway = {tp: starts[tp] + RECORDS_PER_PARTITION // 2 for tp in _ALL}
        for member in members:
            member.commit({tp: OffsetAndMetadata(halfway[tp]) for tp in member.assignment()})
    say(
        f"   each committed half of its partitions: offsets "
        f"{', '.join(f'{tp.partition}:{halfway[tp]}' for tp in _ALL)}; both left the group"
    )
    say("")


def resume_after_restart(sidecar: LocalSidecar, say: Say, check: Check) -> None:
    """One member of the same group, after the restart: it is given every partition and
    starts at the group's commits, reading the second halves and nothing else."""
    config = {"bootstrap.servers": sidecar.address, "group.id": GROUP}
    with Consumer(config) as consumer:
        consumer.subscribe(GROUP_TOPIC)
        ends = consumer.end_offsets(_ALL)
        first_read: dict[TopicPartition, int] = {}
        read = 0
        deadline = time.monotonic() + _SETTLE_S
        while any(consumer.position(tp) < ends[tp] for tp in consumer.assignment()) or len(
            consumer.assignment()
        ) < len(_ALL):
            check(time.monotonic() < deadline, f"{GROUP} did not resume its records in time")
            for record in consumer.poll(200):
                first_read.setdefault(TopicPartition(record.topic, record.partition), record.offset)
                read += 1
        expected = {tp: ends[tp] - RECORDS_PER_PARTITION // 2 for tp in _ALL}
        say(
            f"   {GROUP} resumed at its commits: "
            f"{', '.join(f'{tp.partition}:{first_read.get(tp)}' for tp in _ALL)}; "
            f"read {read} records, the second halves"
        )
        check(first_read == expected, f"{GROUP} resumed at {first_read}, not {expected}")
        check(read == PARTITIONS * RECORDS_PER_PARTITION // 2, f"{GROUP} read {read} records")


def _create(server: str) -> dict[TopicPartition, int]:
    """The topic made (or found from an earlier run); where each partition ends."""
    with AdminClient(server) as admin:
        if GROUP_TOPIC not in admin.list_topics():
            admin.create_topic(GROUP_TOPIC, PARTITIONS)
    with Consumer({"bootstrap.servers": server}) as probe:
        return probe.end_offsets(_ALL)


def _produce(server: str, say: Say) -> None:
    with Producer({"bootstrap.servers": server, "linger.ms": 5}) as producer:
        for n in range(RECORDS_PER_PARTITION):
            for tp in _ALL:
                producer.send(GROUP_TOPIC, b"order %d" % n, partition=tp.partition)
        producer.flush()
    say(f"   produced {RECORDS_PER_PARTITION} records to each partition")


def _commit(server: str, offsets: dict[TopicPartition, int]) -> None:
    cluster = Cluster([server])
    try:
        GroupClient(cluster, GROUP).commit({tp: OffsetAndMetadata(o) for tp, o in offsets.items()})
    finally:
        cluster.close()


def _wait_for_the_split(members: tuple[Consumer, Consumer], check: Check) -> None:
    """Poll both (polls carry the group's news) until each owns a share of the topic."""
    deadline = time.monotonic() + _SETTLE_S
    while True:
        owned = [set(member.assignment()) for member in members]
        if all(owned) and not owned[0] & owned[1] and owned[0] | owned[1] == set(_ALL):
            return
        check(time.monotonic() < deadline, "the two consumers did not share the topic in time")
        for member in members:
            check(member.poll(100) == [], "a record came before any was produced")


def _read(members: tuple[Consumer, Consumer], check: Check) -> dict[TopicPartition, int]:
    """Poll both until every partition was read to this run's end; the records read
    per partition, each by its one owner."""
    received = dict.fromkeys(_ALL, 0)
    deadline = time.monotonic() + _SETTLE_S
    while any(count < RECORDS_PER_PARTITION for count in received.values()):
        check(time.monotonic() < deadline, f"{GROUP} did not read its records in time")
        for member in members:
            for record in member.poll(100):
                tp = TopicPartition(record.topic, record.partition)
                check(tp in member.assignment(), f"{tp} was read by a consumer not owning it")
                received[tp] += 1
    check(all(n == RECORDS_PER_PARTITION for n in received.values()), "records were read twice")
    return received
