"""A partition's next state, given which brokers are alive: Kafka's elections, pure.

Each function takes a ``PartitionState`` and returns the state the controller should
write, or ``None`` when nothing changes. The rules are those of Kafka's KRaft controller:

- A broker that is not alive (its lease expired: it is fenced) leaves the ISR of every
  partition, except that the ISR never empties: with no live member left it is kept as
  it was, the last replicas known to hold every committed record, so the partition can
  come back cleanly when one of them returns.
- A leader that is not alive is replaced by the first live ISR member in replica order,
  in the next leader epoch. With none, the partition goes offline (``NO_LEADER``) unless
  ``unclean.leader.election.enable`` lets any live replica lead, with an ISR of itself
  (committed records it lacks are lost: that is what "unclean" means).
- An offline partition whose ISR member is alive again is led by it.
- A broker stopping on SIGTERM (controlled shutdown) hands its leaderships to another
  live ISR member and leaves the ISRs it is in; the only ISR member stays leader, as in
  Kafka: it has nobody to hand over to.
- The preferred leader (the first replica) takes leadership back once it is alive and in
  the ISR (Kafka's ``auto.leader.rebalance.enable``); separate, so it can be switched off.

The leader epoch moves exactly when the leader changes; an ISR change alone moves only
the partition epoch (the store's compare-and-swap does that), as in Kafka since
metadata version 3.6.
"""

from __future__ import annotations

from collections.abc import Set

from tierlog.partition_state.model import NO_LEADER, PartitionState

__all__ = ["elect", "hand_over", "preferred_leader"]


def elect(state: PartitionState, live: Set[int], unclean: bool) -> PartitionState | None:
    """Fence the brokers that are not ``live`` and keep the partition led if it can be."""
    live_isr = tuple(replica for replica in state.isr if replica in live)
    if state.leader in live_isr:
        return None if live_isr == state.isr else state.with_isr(live_isr)
    if live_isr:
        return state.with_leader(_first_in_replica_order(state, live_isr), isr=live_isr)
    live_replicas = tuple(replica for replica in state.replicas if replica in live)
    if unclean and live_replicas:
        return state.with_leader(live_replicas[0], isr=(live_replicas[0],))
    if state.leader == NO_LEADER:
        return None
    return state.with_leader(NO_LEADER)  # offline, the ISR kept as the last known


def hand_over(state: PartitionState, broker: int, live: Set[int]) -> PartitionState | None:
    """``broker`` is shutting down: it leaves the ISR and hands leadership to another
    live ISR member; the only one it cannot leave, and it stays leader when no other
    ISR member is alive."""
    if broker not in state.isr:
        return None
    others = tuple(replica for replica in state.isr if replica != broker)
    if not others:
        return None
    if state.leader != broker:
        return state.with_isr(others)
    live_others = tuple(replica for replica in others if replica in live)
    if not live_others:
        return None
    return state.with_leader(_first_in_replica_order(state, live_others), isr=others)


def preferred_leader(state: PartitionState, live: Set[int]) -> PartitionState | None:
    """The first replica leads again once it is alive and in sync."""
    preferred = state.replicas[0]
    if preferred == state.leader or preferred not in state.isr or preferred not in live:
        return None
    return state.with_leader(preferred)


def _first_in_replica_order(state: PartitionState, candidates: tuple[int, ...]) -> int:
    return next(replica for replica in state.replicas if replica in candidates)
