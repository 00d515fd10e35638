"""Partition ownership: every broker computes the same owner, or follows the operator's plan."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.sidecars import Sidecars, free_port
from tierlog.api.errors import NotLeaderOrFollowerError
from tierlog.api.v1 import admin_service_pb2, common_pb2, log_service_pb2
from tierlog.broker.ownership import NO_OWNER, Broker, Ownership, read_assignment_file
from tierlog.storage.topic_partition import TopicPartition

from .conftest import Sidecar

BROKERS = (Broker(0, "b0:9092"), Broker(1, "b1:9092"), Broker(2, "b2:9092"))


def test_a_single_broker_owns_everything() -> None:
    alone = Ownership(5, (Broker(5, "me:9092"),))
    assert all(alone.owns(TopicPartition(topic, p)) for topic in "abc" for p in range(10))


def test_brokers_agree_and_spread_each_topics_partitions() -> None:
    views = [Ownership(broker.node_id, BROKERS) for broker in BROKERS]
    for topic in ("orders", "events", "x"):
        tps = [TopicPartition(topic, p) for p in range(6)]
        owners = [owner for tp in tps if (owner := views[0].owner(tp)) is not None]
        assert len(owners) == len(tps)
        assert all(
            view.owner(tp) == owner for view in views for tp, owner in zip(tps, owners, strict=True)
        )
        assert sorted(owner.node_id for owner in owners) == [0, 0, 1, 1, 2, 2]
        for tp, owner in zip(tps, owners, strict=True):
            assert [view.owns(tp) for view in views].count(True) == 1
            assert views[owner.node_id].owns(tp)


def test_the_others_are_told_who_owns_it() -> None:
    tp = TopicPartition("orders", 0)
    owner = Ownership(0, BROKERS).owner(tp)
    assert owner is not None
    stranger = next(broker for broker in BROKERS if broker != owner)
    with pytest.raises(NotLeaderOrFollowerError) as caught:
        Ownership(stranger.node_id, BROKERS).check(tp)
    assert (caught.value.leader_id, caught.value.leader_address) == (owner.node_id, owner.address)
    assert caught.value.reason == "NOT_LEADER_OR_FOLLOWER"


def test_a_broker_missing_from_the_list_is_refused() -> None:
    with pytest.raises(ValueError, match="not in the cluster"):
        Ownership(9, BROKERS)


def test_the_operators_placement_wins_and_the_rest_hash() -> None:
    placed = Ownership(0, BROKERS, {"orders": (2, 2, 0)})
    hashed = Ownership(0, BROKERS)
    owners = [placed.owner(TopicPartition("orders", p)) for p in range(3)]
    assert owners == [BROKERS[2], BROKERS[2], BROKERS[0]]
    beyond = TopicPartition("orders", 3)  # grown since the plan was written
    assert placed.owner(beyond) == hashed.owner(beyond)
    other = TopicPartition("events", 1)
    assert placed.owner(other) == hashed.owner(other)


def test_a_partition_placed_on_nobody_is_served_by_nobody() -> None:
    views = [Ownership(broker.node_id, BROKERS, {"orders": (0, NO_OWNER)}) for broker in BROKERS]
    moving = TopicPartition("orders", 1)
    assert all(view.owner(moving) is None and not view.owns(moving) for view in views)
    with pytest.raises(NotLeaderOrFollowerError, match="no owner") as caught:
        views[2].check(moving)
    assert (caught.value.leader_id, caught.value.leader_address) == (NO_OWNER, "")
    assert views[0].owns(TopicPartition("orders", 0))


def test_a_broker_holds_what_it_owns_and_what_it_released_until_handed_over() -> None:
    placed = {"orders": (0, NO_OWNER, NO_OWNER, 1)}
    released = {"orders": {1: 2, 2: 0}}
    views = [Ownership(broker.node_id, BROKERS, placed, released) for broker in BROKERS]
    held = [[view.holds(TopicPartition("orders", p)) for p in range(4)] for view in views]
    assert held == [
        [True, False, True, False],  # owns 0, released 2
        [False, False, False, True],  # owns 3
        [False, True, False, False],  # released 1
    ]


def test_a_placement_on_an_unlisted_broker_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown brokers"):
        Ownership(0, BROKERS, {"orders": (0, 7)})


def test_the_assignment_file(tmp_path: Path) -> None:
    path = tmp_path / "assignment.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "brokers": {"1": "b1:9092", "0": "b0:9092"},
                "topics": {"orders": [1, 0], "audit": [-1]},
                "released": {"audit": {"0": 1}},
            }
        )
    )
    ownership = read_assignment_file(path, 1)
    assert ownership.brokers == (Broker(0, "b0:9092"), Broker(1, "b1:9092"))
    assert ownership.owns(TopicPartition("orders", 0))
    assert not ownership.owns(TopicPartition("orders", 1))
    assert ownership.holds(TopicPartition("audit", 0))  # it released it
    assert ownership.generation == 0  # a file from before plans had one: the oldest
    path.write_text(json.dumps({"version": 2, "brokers": {}, "topics": {}}))
    with pytest.raises(ValueError, match="version"):
        read_assignment_file(path, 1)


def _write_plan(path: Path, brokers: dict[int, str], topics: dict[str, list[int]]) -> None:
    document = {"version": 1, "brokers": {str(k): v for k, v in brokers.items()}, "topics": topics}
    path.with_suffix(".tmp").write_text(json.dumps(document))
    path.with_suffix(".tmp").replace(path)  # as the kubelet swaps a ConfigMap's files


def _owners(sidecar: Sidecar, topic: str) -> list[int]:
    metadata = sidecar.admin.Metadata(admin_service_pb2.MetadataRequest(topics=[topic]))
    return [partition.leader_id for partition in metadata.topics[0].partitions]


@pytest.mark.slow
def test_running_brokers_follow_a_changed_assignment_file(tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    brokers = {node: f"127.0.0.1:{port}" for node, port in enumerate(ports)}
    plan = tmp_path / "assignment.json"
    _write_plan(plan, brokers, {"orders": [0, 0]})
    with Sidecars() as started:
        sidecars = [
            started.add(
                Sidecar(
                    tmp_path / f"b{node}",
                    (f"node.id={node}", f"tierlog.cluster.assignment.file={plan}"),
                    port,
                ).start()
            )
            for node, port in enumerate(ports)
        ]
        for sidecar in sidecars:
            sidecar.create_topic("orders", partitions=2)
        assert _owners(sidecars[1], "orders") == [0, 0]
        _write_plan(plan, brokers, {"orders": [0, 1]})
        deadline = time.monotonic() + 20
        while _owners(sidecars[1], "orders") != [0, 1]:
            assert time.monotonic() < deadline, "the new plan was not picked up"
            time.sleep(0.2)
        # the new owner made the partition's log, and serves it
        assert (tmp_path / "b1" / "orders-1").is_dir()
        produced = sidecars[1].log.Produce(
            log_service_pb2.ProduceRequest(
                topic="orders",
                partition=1,
                records=log_service_pb2.RecordList(records=[common_pb2.Record(value=b"moved")]),
            )
        )
        assert produced.base_offset == 0
