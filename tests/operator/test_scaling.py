"""Scaling: up at once; down refused without a tier, else drained before the pods go."""

from __future__ import annotations

from tierlog.operator.assignment import Assignment
from tierlog.operator.scaling import plan_scale

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


def test_scaling_down_with_a_tier_drains_then_removes() -> None:
    before = Assignment({n: ADDRESSES[n] for n in range(3)}, {"orders": (0, 1, 2, 0, 1, 2)})
    draining = plan_scale(2, 3, ADDRESSES, TOPICS, before, has_tier=True)
    assert (draining.replicas, draining.draining) == (3, (2,))
    assert 2 not in draining.assignment.topics["orders"]
    assert 2 in draining.assignment.brokers  # still listed: it redirects its clients
    done = plan_scale(2, 3, ADDRESSES, TOPICS, draining.assignment, has_tier=True, drained={2})
    assert (done.replicas, done.draining, done.refused) == (2, (), "")
    assert sorted(done.assignment.brokers) == [0, 1]
    assert done.assignment.topics == draining.assignment.topics
