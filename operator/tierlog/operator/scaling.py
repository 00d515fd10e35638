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
its replicas. A scale-down goes at once when no leaving broker holds a replica, and is
refused while one does (as Strimzi refuses it): moving replicas off a broker, Kafka's
partition reassignment, is not built yet, and removing the broker would leave those
partitions a replica short for good.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from tierlog.operator.assignment import Assignment, hand_over, plan

__all__ = ["DRAINING", "HANDING_OVER", "ScalePlan", "plan_replicated_scale", "plan_scale"]

DRAINING = "Draining"
HANDING_OVER = "HandingOver"


@dataclass(frozen=True)
class ScalePlan:
    replicas: int  # pods the StatefulSet should have now
    assignment: Assignment
    draining: tuple[int, ...] = ()  # leaving brokers still running
    phase: str = ""  # DRAINING or HANDING_OVER while brokers leave
    refused: str = ""  # why a scale-down does not happen


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
    replicas: Mapping[str, Sequence[int]],
) -> ScalePlan:
    """``desired`` brokers of a replicated cluster; ``replicas``: each partition's
    (``TOPIC-PARTITION``) replicas in the partition-state store. The plan only lists
    the brokers (their addresses): the store says who leads."""

    def listing(count: int, refused: str = "") -> ScalePlan:
        everyone = {node: addresses[node] for node in range(count)}
        return ScalePlan(
            count, hand_over(plan(everyone, topics, previous), everyone), refused=refused
        )

    if current is None or desired >= current:
        return listing(desired)
    held = sorted(name for name, ids in replicas.items() if any(node >= desired for node in ids))
    if not held:
        return listing(desired)
    shown = ", ".join(held[:10]) + (f" and {len(held) - 10} more" if len(held) > 10 else "")
    return listing(
        current,
        refused=f"scaling from {current} to {desired} brokers would take replicas of {shown} "
        f"with brokers {', '.join(map(str, range(desired, current)))}; moving replicas "
        f"(reassignment) is not built yet (delete those topics, or scale back to {current})",
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
