"""The admin client against a real sidecar; failures come back as typed Kafka errors."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tierlog.api.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
)
from tierlog.client import AdminClient, NetworkError, Producer, TopicPartition
from tierlog.storage.errors import (
    InvalidConfigError,
    InvalidTopicError,
    UnknownTopicOrPartitionError,
)

from .conftest import SidecarStarter, create_topic
from .sidecars import LiveSidecar, free_port


def test_topics_configs_partitions_and_metadata(sidecar: LiveSidecar) -> None:
    with AdminClient(sidecar.address) as admin:
        admin.create_topic("orders", 3, {"retention.ms": "60000"})
        admin.create_topic("checked", 1, validate_only=True)
        assert admin.list_topics() == {"orders": 3}
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topic("orders")
        with pytest.raises(InvalidTopicError):
            admin.create_topic("bad/name")
        with pytest.raises(InvalidConfigError):
            admin.create_topic("x", 1, {"retention.ms": "soon"})

        (described,) = admin.describe_topics(["orders"])
        assert [p.partition for p in described.partitions] == [0, 1, 2]
        assert all(p.high_watermark == 0 for p in described.partitions)
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.describe_topics(["missing"])

        configs = admin.describe_configs("orders")
        assert configs["retention.ms"].value == "60000" and not configs["retention.ms"].is_default
        assert configs["segment.bytes"].is_default
        admin.alter_configs("orders", {"segment.bytes": "1048576"}, ["retention.ms"])
        configs = admin.describe_configs("orders")
        assert configs["segment.bytes"].value == "1048576" and configs["retention.ms"].is_default

        admin.create_partitions("orders", 5)
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions("orders", 2)
        metadata = admin.metadata(["orders"])
        assert metadata.brokers == {0: sidecar.address}
        assert metadata.leaders == {"orders": (0, 0, 0, 0, 0)}

        with Producer({"bootstrap.servers": sidecar.address}) as producer:
            for _ in range(4):
                producer.send("orders", b"v", partition=4)
        assert admin.delete_records(TopicPartition("orders", 4), 3) == 3

        admin.delete_topic("orders")
        assert admin.list_topics() == {}
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topic("orders")


def test_replication_factors_and_the_replicas_described(sidecar: LiveSidecar) -> None:
    with AdminClient(sidecar.address) as admin:
        with pytest.raises(InvalidReplicationFactorError, match="at least 1 replica, not 0"):
            admin.create_topic("orders", 2, replication_factor=0)  # on the wire: the default
        with pytest.raises(InvalidReplicationFactorError, match=r"replication\.state\.dir"):
            admin.create_topic("orders", 2, replication_factor=2)
        admin.create_topic("orders", 2, replication_factor=1)
        admin.create_topic("defaulted", 1)
        assert admin.list_topics() == {"orders": 2, "defaulted": 1}
        (described,) = admin.describe_topics(["orders"])
    assert [(p.leader_id, p.leader_epoch, p.replicas, p.isr) for p in described.partitions] == [
        (0, 0, (0,), (0,)),
        (0, 0, (0,), (0,)),
    ]


def test_no_sidecar_is_a_network_error() -> None:
    with (
        AdminClient(f"127.0.0.1:{free_port()}", request_timeout_ms=2000) as admin,
        pytest.raises(NetworkError),
    ):
        admin.list_topics()


def test_prepare_restart_reports_the_broker_safe_once_flushed(sidecar: LiveSidecar) -> None:
    with AdminClient(sidecar.address) as admin:
        admin.create_topic("orders", 2)
        with Producer({"bootstrap.servers": sidecar.address}) as producer:
            for key in range(20):
                producer.send("orders", value=b"v", key=str(key).encode())
            producer.flush()
        readiness = admin.prepare_restart()
    assert readiness.node_id == 0
    assert readiness.unflushed_messages == 0
    assert readiness.segments_awaiting_upload == 0
    assert readiness.safe


def test_a_topic_of_no_partitions_is_refused_not_made_one(sidecar: LiveSidecar) -> None:
    with AdminClient(sidecar.address) as admin:
        for count in (0, -1):
            with pytest.raises(InvalidPartitionsError, match=f"not {count}"):
                admin.create_topic("empty", count)
        assert "empty" not in admin.list_topics()


def test_a_broker_that_does_not_answer_is_passed_over_for_the_next(
    sidecars: SidecarStarter,
) -> None:
    paused, live = sidecars("paused"), sidecars("live")
    create_topic(live.address, "orders")
    os.kill(paused.process.pid, signal.SIGSTOP)  # connects, never answers
    try:
        config = {"bootstrap.servers": f"{paused.address},{live.address}"}
        with AdminClient(config, request_timeout_ms=1000) as admin:
            assert admin.list_topics() == {"orders": 1}
    finally:
        os.kill(paused.process.pid, signal.SIGCONT)


def test_a_silent_first_bootstrap_server_holds_a_call_up_only_until_the_next_is_asked(
    sidecars: SidecarStarter,
) -> None:
    """At the default request.timeout.ms (30 s): a call is not held up by the first
    bootstrap server, connected and then paused, for its timeout, only until the next
    broker is asked beside it (``retry.backoff.max.ms``); from then on the silent one
    is asked last (issue 29)."""
    paused, live = sidecars("paused"), sidecars("live")
    create_topic(live.address, "orders")
    with AdminClient([paused.address, live.address]) as admin:
        assert admin.list_topics() == {}  # the first answers: its connection is up
        os.kill(paused.process.pid, signal.SIGSTOP)  # and answers no more
        try:
            started = time.monotonic()
            assert admin.list_topics() == {"orders": 1}
            first_s = time.monotonic() - started
            started = time.monotonic()
            assert admin.list_topics() == {"orders": 1}
            again_s = time.monotonic() - started
        finally:
            os.kill(paused.process.pid, signal.SIGCONT)
    assert first_s < admin.cluster.request_timeout_s / 2, first_s  # not held for it
    assert admin.cluster.hedge_after_s <= first_s, first_s
    assert again_s < admin.cluster.hedge_after_s, again_s


def _three_unreplicated(sidecars: SidecarStarter) -> list[LiveSidecar]:
    ports = [free_port() for _ in range(3)]
    brokers = ",".join(f"{n}@127.0.0.1:{port}" for n, port in enumerate(ports))
    return [
        sidecars(f"b{n}", f"node.id={n}", f"tierlog.cluster.brokers={brokers}", port=port)
        for n, port in enumerate(ports)
    ]


def _topics_at(broker: LiveSidecar) -> dict[str, int]:
    with AdminClient(broker.address) as admin:
        return admin.list_topics()


def test_topic_changes_reach_every_broker_that_keeps_its_own_topics(
    sidecars: SidecarStarter,
) -> None:
    """Without a partition-state store each broker keeps its own topics; the admin
    client, asked through the bootstrap list, changes them on every broker (as Kafka's
    controller does), not only on whichever answered first."""
    brokers = _three_unreplicated(sidecars)
    bootstrap = {"bootstrap.servers": ",".join(b.address for b in brokers)}
    with AdminClient(bootstrap) as admin:
        admin.create_topic("orders", 3, {"retention.ms": "60000"})
        assert [_topics_at(b) for b in brokers] == [{"orders": 3}] * 3
        # Every broker names the same owner of each partition, and each owns one.
        owners = set()
        for broker in brokers:
            with AdminClient(broker.address) as one:
                owners.add(one.metadata(["orders"]).leaders["orders"])
        (leaders,) = owners
        assert sorted(leaders) == [0, 1, 2]
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topic("orders")  # every broker has it

        admin.create_partitions("orders", 6)
        admin.alter_configs("orders", {"segment.bytes": "1048576"}, ["retention.ms"])
        for broker in brokers:
            with AdminClient(broker.address) as one:
                configs = one.describe_configs("orders")
                assert one.list_topics() == {"orders": 6}
                assert configs["segment.bytes"].value == "1048576"
                assert configs["retention.ms"].is_default

        admin.delete_topic("orders")
        assert [_topics_at(b) for b in brokers] == [{}] * 3
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topic("orders")  # on no broker


def test_a_topic_change_that_reached_some_brokers_completes_when_asked_again(
    sidecars: SidecarStarter,
) -> None:
    brokers = _three_unreplicated(sidecars)
    with AdminClient(brokers[1].address, broker_only=True) as one:
        one.create_topic("orders", 2)  # as a create cut short after broker 1
    assert [_topics_at(b) for b in brokers] == [{}, {"orders": 2}, {}]
    with AdminClient(brokers[0].address) as admin:
        admin.create_topic("orders", 2)
    assert [_topics_at(b) for b in brokers] == [{"orders": 2}] * 3
