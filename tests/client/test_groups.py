"""A consumer with a ``group.id`` against real sidecars: it commits, and a consumer of the
same group resumes where the last commit left off, across a coordinator's ``kill -9``."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

import pytest

from tierlog.api.errors import InvalidGroupIdError
from tierlog.client import Consumer, Producer, TopicPartition
from tierlog.client.groups import GroupClient, OffsetAndMetadata

from .conftest import SidecarStarter, create_topic, poll_until
from .sidecars import LiveSidecar, free_port

TP = TopicPartition("events", 0)
PARTITIONS = "offsets.topic.num.partitions=3"


@pytest.fixture
def sidecar(sidecars: SidecarStarter) -> LiveSidecar:
    sidecar = sidecars("data", PARTITIONS)
    create_topic(sidecar.address, "events")
    with Producer({"bootstrap.servers": sidecar.address}) as producer:
        for i in range(20):
            producer.send("events", b"%d" % i)
        producer.flush()
    return sidecar


def _consumer(sidecar: LiveSidecar, **props: object) -> Consumer:
    config: dict[str, object] = {
        "bootstrap.servers": sidecar.address,
        "group.id": "readers",
        "auto.offset.reset": "earliest",
    }
    config.update({key.replace("_", "."): value for key, value in props.items()})
    return Consumer(config)


def test_a_consumer_resumes_at_its_groups_commit(sidecar: LiveSidecar) -> None:
    with _consumer(sidecar, enable_auto_commit=False, max_poll_records=6) as first:
        first.assign([TP])
        assert [r.offset for r in first.poll(5000)] == list(range(6))
        first.commit()
        assert first.committed([TP]) == {TP: OffsetAndMetadata(6, "", -1, _stored_at(first))}
        first.poll(5000)  # read on, uncommitted
    with _consumer(sidecar, enable_auto_commit=False) as second:
        second.assign([TP])
        assert second.position(TP) == 6
        assert [r.offset for r in poll_until(second, 14)] == list(range(6, 20))


def _stored_at(consumer: Consumer) -> int:
    committed = consumer.committed([TP])[TP]
    assert committed is not None and committed.commit_timestamp_ms > 0
    return committed.commit_timestamp_ms


def test_without_a_commit_the_group_starts_at_auto_offset_reset(sidecar: LiveSidecar) -> None:
    with _consumer(sidecar, auto_offset_reset="latest") as consumer:
        consumer.assign([TP])
        assert consumer.committed([TP]) == {TP: None}
        assert consumer.position(TP) == 20


def test_auto_commit_commits_what_earlier_polls_returned_and_on_close(
    sidecar: LiveSidecar,
) -> None:
    with _consumer(sidecar, auto_commit_interval_ms=0, max_poll_records=5) as consumer:
        consumer.assign([TP])
        assert len(consumer.poll(5000)) == 5
        consumer.poll(5000)  # commits offset 5 before returning 5..9, asynchronously
        deadline = time.monotonic() + 10
        while (committed := _offset(consumer)) != 5:  # none, or the acknowledged 5
            assert committed is None, f"{committed} committed, not the position 5"
            assert time.monotonic() < deadline, "the automatic commit never landed"
            time.sleep(0.02)
        assert consumer.position(TP) == 10
    with _consumer(sidecar) as again:  # the commit on close stored 10
        again.assign([TP])
        assert again.position(TP) == 10


def test_close_commits_every_assigned_partition_also_those_with_nothing_read(
    sidecar: LiveSidecar,
) -> None:
    """As Kafka's consumer: every assigned partition's position is committed, so a
    partition with nothing to read is the group's too (LAG 0 in ``--describe``)."""
    create_topic(sidecar.address, "billing", 3)
    with Producer({"bootstrap.servers": sidecar.address}) as producer:
        for i in range(4):
            producer.send("billing", b"%d" % i, partition=1)
        producer.flush()
    partitions = [TopicPartition("billing", p) for p in range(3)]
    with _consumer(sidecar, group_id="billing") as consumer:
        consumer.subscribe(["billing"])
        assert len(poll_until(consumer, 4)) == 4
        assert sorted(consumer.assignment()) == partitions
    with _consumer(sidecar, group_id="billing") as again:
        committed = again.committed(partitions)
    assert {tp: found and found.offset for tp, found in committed.items()} == {
        partitions[0]: 0,
        partitions[1]: 4,
        partitions[2]: 0,
    }


def _offset(consumer: Consumer) -> int | None:
    committed = consumer.committed([TP])[TP]
    return None if committed is None else committed.offset


def test_commit_async_calls_back_in_order(sidecar: LiveSidecar) -> None:
    told: list[tuple[int, BaseException | None]] = []
    done = threading.Event()

    def callback(
        offsets: Mapping[TopicPartition, OffsetAndMetadata], error: BaseException | None
    ) -> None:
        told.append((offsets[TP].offset, error))
        if len(told) == 3:
            done.set()

    with _consumer(sidecar, enable_auto_commit=False) as consumer:
        consumer.assign([TP])
        for offset in (3, 4, 5):
            consumer.commit_async({TP: OffsetAndMetadata(offset, "m")}, callback)
        assert done.wait(10)
        assert told == [(3, None), (4, None), (5, None)]
        committed = consumer.committed([TP])[TP]
        assert committed is not None and (committed.offset, committed.metadata) == (5, "m")


def test_a_consumer_without_a_group_cannot_commit(sidecar: LiveSidecar) -> None:
    with Consumer({"bootstrap.servers": sidecar.address}) as consumer:
        consumer.assign([TP])
        with pytest.raises(InvalidGroupIdError):
            consumer.commit()
        with pytest.raises(InvalidGroupIdError):
            consumer.committed([TP])


def test_commits_wait_out_a_coordinators_restart(sidecar: LiveSidecar) -> None:
    """The coordinator is killed after an acknowledged commit and started again: the
    client's calls meet a lost connection, then COORDINATOR_LOAD_IN_PROGRESS, and retry
    through both; the commit is there."""
    with _consumer(sidecar, enable_auto_commit=False) as consumer:
        consumer.assign([TP])
        consumer.commit({TP: OffsetAndMetadata(7)})
        sidecar.kill()
        restarted = threading.Thread(target=sidecar.start)
        restarted.start()
        try:
            committed = consumer.committed([TP])[TP]
            assert committed is not None and committed.offset == 7
            consumer.commit({TP: OffsetAndMetadata(8)})
        finally:
            restarted.join()
    with _consumer(sidecar) as again:
        again.assign([TP])
        assert again.position(TP) == 8


def test_group_client_finds_the_coordinator_at_another_broker(sidecars: SidecarStarter) -> None:
    """Bootstrapped at one broker, a group's calls go to the broker that coordinates it."""
    ports = [free_port(), free_port()]
    brokers = ",".join(f"{node}@127.0.0.1:{port}" for node, port in enumerate(ports))
    started = [
        sidecars(
            f"b{node}",
            PARTITIONS,
            f"node.id={node}",
            f"tierlog.cluster.brokers={brokers}",
            port=port,
        )
        for node, port in enumerate(ports)
    ]
    create_topic(started[0].address, "events", partitions=2)  # the admin client tells both
    with Consumer({"bootstrap.servers": started[0].address}) as plain:
        cluster = plain.cluster
        coordinators = set()
        for index in range(6):
            group = GroupClient(cluster, f"group-{index}")
            group.commit({TP: OffsetAndMetadata(index)})
            assert group.committed([TP]) == {TP: OffsetAndMetadata(index, "", -1, _time(group))}
            coordinators.add(group.coordinator())
        assert coordinators == {broker.address for broker in started}


def _time(group: GroupClient) -> int:
    committed = group.committed([TP])[TP]
    assert committed is not None
    return committed.commit_timestamp_ms
