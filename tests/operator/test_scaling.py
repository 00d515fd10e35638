"""Scaling: up at once; down refused where data would be lost, else released, drained,
handed over, and only then the pods go."""

from __future__ import annotations

from tierlog.controller.reassignment import start_reassignment
from tierlog.operator.assignment import NO_OWNER, Assignment
from tierlog.operator.scaling import (
    DRAINING,
    HANDING_OVER,
    REASSIGNING,
    plan_replicated_scale,
    plan_scale,
)
from tierlog.partition_state.model import PartitionState
from tierlog.storage.topic_partition import TopicPartition

ADDRESSES = {node: f"b{node}:9092" for node in range(5)}
TOPICS = {"orders": 6}


def test_the_first_pass_runs_what_is_asked() -> None:
    scale = plan_scale(3, None, ADDRESSES, TOPICS, None, has_tier=False)
    assert scale.replicas == 3 and sorted(scale.assignment.brokers) == [0, 1, 2]


def test_scaling_up_keeps_every_partition_where_it_is() -> None:
    before = Assignment({n: ADDRESSES[n] for n in range(2)}, {"orders": (0, 1, 0, 1, 0, 1)})
    scale = plan_scale(4, 2, ADDRESSES, TOPICS, before, has_tier=False)
    assert scale.replicas == 4
    assert scale.assignment.topics["orders"] == before.topics["orders"]


def test_scaling_down_without_a_tier_is_refused() -> None:
    before = Assignment({n: ADDRESSES[n] for n in range(3)}, {"orders": (0, 1, 2, 0, 1, 2)})
    scale = plan_scale(2, 3, ADDRESSES, TOPICS, before, has_tier=False)
    assert scale.replicas == 3
    assert "no tier" in scale.refused and "brokers 2" in scale.refused
    assert scale.assignment.topics == before.topics


def test_scaling_down_releases_then_waits_then_hands_over_then_removes() -> None:
    before = Assignment({n: ADDRESSES[n] for n in range(3)}, {"orders": (0, 1, 2, 0, 1, 2)})
    draining = plan_scale(2, 3, ADDRESSES, TOPICS, before, has_tier=True)
    assert (draining.replicas, draining.draining, draining.phase) == (3, (2,), DRAINING)
    assert draining.assignment.topics["orders"] == (0, 1, NO_OWNER, 0, 1, NO_OWNER)
    assert draining.assignment.released == {"orders": {2: 2, 5: 2}}
    assert 2 in draining.assignment.brokers  # still listed until its pod goes
    # not drained yet (a pass later): nothing changes, whoever else is drained
    again = plan_scale(2, 3, ADDRESSES, TOPICS, draining.assignment, has_tier=True, drained={5})
    assert again == draining
    handing = plan_scale(2, 3, ADDRESSES, TOPICS, draining.assignment, has_tier=True, drained={2})
    assert (handing.replicas, handing.draining, handing.phase) == (3, (2,), HANDING_OVER)
    assert handing.assignment.topics["orders"][:2] == (0, 1)
    assert NO_OWNER not in handing.assignment.topics["orders"]
    assert 2 not in handing.assignment.topics["orders"]
    done = plan_scale(2, 3, ADDRESSES, TOPICS, handing.assignment, has_tier=True, drained={2})
    assert (done.replicas, done.draining, done.phase, done.refused) == (2, (), "", "")
    assert sorted(done.assignment.brokers) == [0, 1]
    assert done.assignment.topics == handing.assignment.topics
    # a leaving broker that stops answering after the hand-over keeps its pod for now
    held = plan_scale(2, 3, ADDRESSES, TOPICS, handing.assignment, has_tier=True)
    assert (held.replicas, held.phase, held.assignment) == (3, DRAINING, handing.assignment)


def test_a_called_off_scale_down_gives_the_partitions_back() -> None:
    before = Assignment({n: ADDRESSES[n] for n in range(3)}, {"orders": (0, 1, 2, 0, 1, 2)})
    draining = plan_scale(2, 3, ADDRESSES, TOPICS, before, has_tier=True)
    back = plan_scale(3, 3, ADDRESSES, TOPICS, draining.assignment, has_tier=True)
    assert (back.replicas, back.draining, back.phase) == (3, (), "")
    assert back.assignment.topics == before.topics and back.assignment.released == {}


def test_a_leaving_broker_with_an_untiered_topic_is_refused() -> None:
    before = Assignment(
        {n: ADDRESSES[n] for n in range(3)}, {"orders": (0, 1, 2, 0, 1, 2), "logs": (0, 1)}
    )
    topics = {"orders": 6, "logs": 2}
    fine = plan_scale(2, 3, ADDRESSES, topics, before, has_tier=True, untiered={"logs"})
    assert (fine.phase, fine.refused) == (DRAINING, "")  # "logs" has nothing on broker 2
    refused = plan_scale(1, 3, ADDRESSES, topics, before, has_tier=True, untiered={"logs"})
    assert refused.replicas == 3 and refused.phase == ""
    assert "logs are not tiered" in refused.refused and "remote.storage.enable" in refused.refused
    assert refused.assignment.topics == before.topics
    # refused half-way (the topic stopped being tiered): back to the broker that released it
    late = plan_scale(2, 3, ADDRESSES, TOPICS, fine.assignment, has_tier=True, untiered={"orders"})
    assert late.refused and late.assignment.topics["orders"] == before.topics["orders"]


def _states(replicas: dict[str, tuple[int, ...]]) -> dict[TopicPartition, PartitionState]:
    """``{"orders-0": (0, 1)}`` -> orders-0's state, every replica in sync."""
    states = {}
    for name, ids in replicas.items():
        topic, partition = name.rsplit("-", 1)
        states[TopicPartition(topic, int(partition))] = PartitionState.new(ids)
    return states


def test_a_replicated_cluster_scales_down_at_once_when_no_replica_leaves() -> None:
    before = Assignment({n: ADDRESSES[n] for n in range(3)}, {"orders": (0, 1, 2, 0, 1, 2)})
    states = _states({"orders-0": (0, 1), "orders-1": (1, 0)})
    scale = plan_replicated_scale(2, 3, ADDRESSES, TOPICS, before, states, {})
    assert (scale.replicas, scale.draining, scale.phase, scale.refused) == (2, (), "", "")
    assert sorted(scale.assignment.brokers) == [0, 1]
    assert NO_OWNER not in scale.assignment.topics["orders"]


def test_a_replicated_scale_down_moves_the_leaving_brokers_replicas_first() -> None:
    before = Assignment({n: ADDRESSES[n] for n in range(4)}, {"orders": (0, 1, 2, 3, 0, 1)})
    states = _states({"orders-0": (0, 1, 3), "orders-1": (3, 0, 2), "other-0": (0, 1)})
    zones = {0: "a", 1: "a", 2: "b", 3: "b"}
    scale = plan_replicated_scale(3, 4, ADDRESSES, TOPICS, before, states, zones)
    assert (scale.replicas, scale.draining, scale.phase, scale.refused) == (
        4,
        (3,),
        REASSIGNING,
        "",
    )
    orders_0, orders_1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
    assert scale.moving == (orders_0, orders_1)
    # In place, on the zone the partition lacks: broker 2 (zone b) for orders-0.
    assert dict(scale.reassign) == {orders_0: (0, 1, 2), orders_1: (1, 0, 2)}

    # Started: still moving (broker 3 is among the replicas) but nothing more to start.
    moving = {**states, orders_0: start_reassignment(states[orders_0], (0, 1, 2))}
    moving[orders_1] = start_reassignment(states[orders_1], (1, 0, 2))
    started = plan_replicated_scale(3, 4, ADDRESSES, TOPICS, before, moving, zones)
    assert (started.replicas, started.phase, started.moving) == (4, REASSIGNING, scale.moving)
    assert dict(started.reassign) == {}
    # Completed: the pods go.
    done = {
        **states,
        orders_0: PartitionState.new((0, 1, 2)),
        orders_1: PartitionState.new((1, 0, 2)),
    }
    finished = plan_replicated_scale(3, 4, ADDRESSES, TOPICS, before, done, zones)
    assert (finished.replicas, finished.phase, finished.draining) == (3, "", ())
    assert plan_replicated_scale(5, 4, ADDRESSES, TOPICS, before, states, zones).replicas == 5


def test_a_replicated_scale_down_below_a_partitions_replicas_is_refused() -> None:
    before = Assignment({n: ADDRESSES[n] for n in range(3)}, {"orders": (0, 1, 2, 0, 1, 2)})
    states = _states({"orders-0": (0, 1, 2)})
    scale = plan_replicated_scale(2, 3, ADDRESSES, TOPICS, before, states, {})
    assert (scale.replicas, scale.draining, scale.reassign) == (3, (), {})
    assert "replication factor 3 is larger than the 2 available brokers" in scale.refused
