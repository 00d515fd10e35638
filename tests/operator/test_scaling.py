"""Scaling: up at once; down refused where data would be lost, else released, drained,
handed over, and only then the pods go."""

from __future__ import annotations

from tierlog.operator.assignment import NO_OWNER, Assignment
from tierlog.operator.scaling import DRAINING, HANDING_OVER, plan_replicated_scale, plan_scale

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


def test_a_replicated_cluster_scales_down_at_once_when_no_replica_leaves() -> None:
    before = Assignment({n: ADDRESSES[n] for n in range(3)}, {"orders": (0, 1, 2, 0, 1, 2)})
    replicas = {"orders-0": (0, 1), "orders-1": (1, 0)}
    scale = plan_replicated_scale(2, 3, ADDRESSES, TOPICS, before, replicas)
    assert (scale.replicas, scale.draining, scale.phase, scale.refused) == (2, (), "", "")
    assert sorted(scale.assignment.brokers) == [0, 1]
    assert NO_OWNER not in scale.assignment.topics["orders"]


def test_a_replicated_scale_down_is_refused_while_a_leaving_broker_holds_a_replica() -> None:
    before = Assignment({n: ADDRESSES[n] for n in range(3)}, {"orders": (0, 1, 2, 0, 1, 2)})
    replicas = {"orders-0": (0, 1, 2), "orders-1": (1, 0, 2), "other-0": (0, 1)}
    scale = plan_replicated_scale(2, 3, ADDRESSES, TOPICS, before, replicas)
    assert (scale.replicas, scale.draining) == (3, ())
    assert "replicas of orders-0, orders-1 with brokers 2" in scale.refused
    assert "reassignment" in scale.refused
    up = plan_replicated_scale(4, 3, ADDRESSES, TOPICS, before, replicas)
    assert (up.replicas, up.refused) == (4, "")
