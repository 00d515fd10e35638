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
- An offline partition whose ISR member is alive again is led by it, unless that
  member's log dir was formatted at its start (``lost``: its lease says so) and other
  replicas exist: it holds nothing of what the ISR promised, and leading it would
  truncate every other replica.
- A broker whose log dir was formatted at its start and that is the only ISR member
  of a partition (so it cannot leave the ISR) does not lead its empty log while another
  replica may hold the records: it asks the other replicas how far their logs go and
  elects the one with the highest (last leader epoch, log end offset), with an ISR of
  itself (``recover``, Kafka's unclean recovery of KIP-966). With no answer the
  partition stays offline, its ISR kept, until one comes; with no other replica (one
  replica only) the empty log is all there is, and it leads.
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

from collections.abc import Mapping, Set
from dataclasses import dataclass

from tierlog.partition_state.model import NO_LEADER, PartitionState

__all__ = ["ReplicaLogEnd", "elect", "hand_over", "preferred_leader", "recover"]


@dataclass(frozen=True, order=True)
class ReplicaLogEnd:
    """How far a replica's log goes, as it says (Kafka's GetReplicaLogInfo): compared
    by the leader epoch of its last batch first, then its log end offset."""

    last_leader_epoch: int
    log_end_offset: int


def elect(
    state: PartitionState, live: Set[int], unclean: bool, lost: Set[int] = frozenset()
) -> PartitionState | None:
    """Fence the brokers that are not ``live`` and keep the partition led if it can be;
    an offline partition with other replicas is not led again by an ISR member in
    ``lost`` (its log dir was formatted at its start: ``recover`` is its way back)."""
    live_isr = tuple(replica for replica in state.isr if replica in live)
    if state.leader in live_isr:
        return None if live_isr == state.isr else state.with_isr(live_isr)
    if state.leader == NO_LEADER and len(state.replicas) > 1:
        live_isr = tuple(replica for replica in live_isr if replica not in lost)
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


def recover(
    state: PartitionState, broker: int, answers: Mapping[int, ReplicaLogEnd]
) -> PartitionState | None:
    """``broker``'s log dir was formatted at its start: where it is the only ISR member
    and other replicas exist, the replica among ``answers`` (the other replicas that said
    how far their logs go) holding the most leads, with an ISR of itself; with no answer,
    the partition is offline (its ISR kept). None where ``broker`` may lead (one replica
    only) or the partition is not its to recover (other ISR members: they lead)."""
    if state.isr != (broker,) or len(state.replicas) == 1:
        return None
    candidates = {r: end for r, end in answers.items() if r in state.replicas and r != broker}
    if candidates:
        # The most records first; between equals, the earlier in replica order.
        order = {replica: index for index, replica in enumerate(state.replicas)}
        best = max(candidates, key=lambda r: (candidates[r], -order[r]))
        return state.with_leader(best, isr=(best,))
    return None if state.leader == NO_LEADER else state.with_leader(NO_LEADER)


def preferred_leader(state: PartitionState, live: Set[int]) -> PartitionState | None:
    """The first replica leads again once it is alive and in sync."""
    preferred = state.replicas[0]
    if preferred == state.leader or preferred not in state.isr or preferred not in live:
        return None
    return state.with_leader(preferred)


def _first_in_replica_order(state: PartitionState, candidates: tuple[int, ...]) -> int:
    return next(replica for replica in state.replicas if replica in candidates)
