"""How many broker pods to run, and where partitions live meanwhile (pure).

Scaling up is immediate: new brokers start empty and take new partitions only.

Scaling down moves data, so it goes in steps, each visible in the status:

1. Without a tier, or with a topic on a leaving broker that is not tiered
   (``remote.storage.enable``), the data exists on the leaving volumes only: the
   scale-down is refused (the pods stay) and a condition says why.
2. ``Draining``: the plan releases the leaving brokers' partitions to nobody
   (``NO_OWNER``: clients get a retriable error meanwhile), while the pods keep running.
   Once a leaving broker has read that plan, ``PrepareRestart`` rolls those partitions
   and uploads what the tier lacks. The step lasts until every leaving broker owns
   nothing and says it is safe: everything it held is in the tier.
3. ``HandingOver``: the released partitions go to the staying brokers, which continue
   each one from the tier. Only now, since a new owner fences the old one's uploads.
4. Once the leaving brokers own nothing and are still safe, the pods go and the plan
   forgets them.

A scale-down called off before step 3 gives each released partition back to the broker
that released it.

With replication (``plan_replicated_scale``) nothing drains: a partition's data is on
its replicas. A scale-down goes at once when no leaving broker holds a replica;
otherwise the replicas move first (``REASSIGNING``), as Kafka's partition reassignment
moves them: each partition with a replica on a leaving broker gets a target without it
(``replication.placement.replicas_without``: in place, rack-aware, least loaded), which
the operator starts and its controller completes once the new replicas are in sync.
The pods go once no leaving broker holds a replica. A scale-down with more replicas
than the staying brokers can hold is refused.

Scaling up moves nothing (neither does Kafka; Strimzi leaves it to Cruise Control):
new brokers take new topics and partitions, and ``tierlog partitions reassign`` moves
existing ones onto them when asked.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from tierlog.api.errors import InvalidReplicationFactorError
from tierlog.operator.assignment import Assignment, hand_over, plan
from tierlog.partition_state.model import PartitionState
from tierlog.replication.placement import replicas_without
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "DRAINING",
    "HANDING_OVER",
    "REASSIGNING",
    "ScalePlan",
    "plan_replicated_scale",
    "plan_scale",
]

DRAINING = "Draining"
HANDING_OVER = "HandingOver"
REASSIGNING = "Reassigning"


@dataclass(frozen=True)
class ScalePlan:
    replicas: int  # pods the StatefulSet should have now
    assignment: Assignment
    draining: tuple[int, ...] = ()  # leaving brokers still running
    phase: str = ""  # DRAINING or HANDING_OVER while brokers leave
    refused: str = ""  # why a scale-down does not happen
    # REASSIGNING: the partitions whose replicas are still on leaving brokers, and the
    # targets of those whose move is not started yet.
    moving: tuple[TopicPartition, ...] = ()
    reassign: Mapping[TopicPartition, tuple[int, ...]] = field(default_factory=dict)


def plan_scale(
    desired: int,
    current: int | None,
    addresses: Mapping[int, str],
    topics: Mapping[str, int],
    previous: Assignment | None,
    *,
    has_tier: bool,
    untiered: Collection[str] = (),
    drained: Collection[int] = (),
) -> ScalePlan:
    """``desired`` brokers from ``current`` pods (None: nothing exists yet); ``addresses``
    knows every broker id up to the larger of the two; ``untiered``: topics without
    ``remote.storage.enable``; ``drained``: leaving brokers that own nothing any more
    and said they are safe."""

    def brokers(count: int) -> dict[int, str]:
        return {node: addresses[node] for node in range(count)}

    if current is None or desired >= current:
        everyone = brokers(desired)
        return ScalePlan(desired, hand_over(plan(everyone, topics, previous), everyone))
    leaving = tuple(range(desired, current))
    why = _data_at_risk(leaving, topics, previous, has_tier=has_tier, untiered=untiered)
    if why:
        kept = brokers(current)
        return ScalePlan(
            current,
            hand_over(plan(kept, topics, previous), kept),
            refused=f"scaling from {current} to {desired} brokers would lose the data of "
            f"brokers {', '.join(map(str, leaving))}: {why} (or scale back to {current})",
        )
    released = plan(brokers(current), topics, previous, leaving=leaving)
    if not all(node in drained for node in leaving):
        return ScalePlan(current, released, draining=leaving, phase=DRAINING)
    if released.unowned():
        staying = range(desired)
        handed = hand_over(released, staying, drained=leaving)
        return ScalePlan(current, handed, draining=leaving, phase=HANDING_OVER)
    return ScalePlan(desired, plan(brokers(desired), topics, released))


def plan_replicated_scale(
    desired: int,
    current: int | None,
    addresses: Mapping[int, str],
    topics: Mapping[str, int],
    previous: Assignment | None,
    states: Mapping[TopicPartition, PartitionState],
    racks: Mapping[int, str],
) -> ScalePlan:
    """``desired`` brokers of a replicated cluster; ``states``: each partition's state in
    the partition-state store; ``racks``: the brokers' zones. The plan only lists the
    brokers (their addresses): the store says who leads."""

    def listing(count: int) -> ScalePlan:
        everyone = {node: addresses[node] for node in range(count)}
        return ScalePlan(count, hand_over(plan(everyone, topics, previous), everyone))

    if current is None or desired >= current:
        return listing(desired)
    leaving = tuple(range(desired, current))
    moving = tuple(sorted(tp for tp, s in states.items() if set(s.replicas) & set(leaving)))
    if not moving:
        return listing(desired)
    staying = {node: racks.get(node) for node in range(desired)}
    targets = {tp: states[tp].target_replicas for tp in moving}
    try:
        reassign = replicas_without(staying, targets, leaving)
    except InvalidReplicationFactorError as error:
        refused = (
            f"scaling from {current} to {desired} brokers cannot keep every replica: "
            f"{error} (scale back to {current})"
        )
        return replace(listing(current), refused=refused)
    return replace(
        listing(current), draining=leaving, phase=REASSIGNING, moving=moving, reassign=reassign
    )


def _data_at_risk(
    leaving: tuple[int, ...],
    topics: Mapping[str, int],
    previous: Assignment | None,
    *,
    has_tier: bool,
    untiered: Collection[str],
) -> str:
    """Why the leaving brokers' data cannot move through the tier ("" if it can)."""
    if not has_tier:
        return "there is no tier to move it through (set spec.tier)"
    if previous is None:
        return ""
    held = sorted(
        {
            topic
            for topic in untiered
            if topic in topics and topic in previous.topics
            for partition in range(len(previous.topics[topic]))
            if previous.holder(topic, partition) in leaving
        }
    )
    if held:
        return (
            f"topics {', '.join(held)} are not tiered and have partitions there "
            "(set remote.storage.enable: true on them)"
        )
    return ""
