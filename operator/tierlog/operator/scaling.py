"""How many broker pods to run, and where partitions live meanwhile (pure).

Scaling up is immediate: new brokers start empty and take new partitions only.

Scaling down moves data, so it goes in steps, each visible in the status:

1. Without a tier the leaving brokers' partitions exist on their volumes only: the
   scale-down is refused (the pods stay) and a condition says why.
2. With a tier, the plan first moves every partition off the leaving brokers (they
   stop taking writes for them), while their pods keep running.
3. Once each leaving broker has picked up that plan and says it is safe (flushed,
   nothing waiting for the tier), the pods go and the plan forgets them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from tierlog.operator.assignment import Assignment, plan

__all__ = ["ScalePlan", "plan_scale"]


@dataclass(frozen=True)
class ScalePlan:
    replicas: int  # pods the StatefulSet should have now
    assignment: Assignment
    draining: tuple[int, ...] = ()  # leaving brokers still running
    refused: str = ""  # why a scale-down does not happen


def plan_scale(
    desired: int,
    current: int | None,
    addresses: Mapping[int, str],
    topics: Mapping[str, int],
    previous: Assignment | None,
    *,
    has_tier: bool,
    drained: Collection[int] = (),
) -> ScalePlan:
    """``desired`` brokers from ``current`` pods (None: nothing exists yet); ``addresses``
    knows every broker id up to the larger of the two; ``drained``: leaving brokers that
    own nothing any more and said they are safe."""

    def brokers(count: int) -> dict[int, str]:
        return {node: addresses[node] for node in range(count)}

    if current is None or desired >= current:
        return ScalePlan(desired, plan(brokers(desired), topics, previous))
    leaving = tuple(range(desired, current))
    if not has_tier:
        return ScalePlan(
            current,
            plan(brokers(current), topics, previous),
            refused=f"scaling from {current} to {desired} brokers would lose the data of "
            f"brokers {', '.join(map(str, leaving))}: there is no tier to move it through "
            "(set spec.tier, or scale back to "
            f"{current})",
        )
    moved = plan(brokers(current), topics, previous, leaving=leaving)
    if all(node in drained for node in leaving):
        return ScalePlan(desired, plan(brokers(desired), topics, moved))
    return ScalePlan(current, moved, draining=leaving)
