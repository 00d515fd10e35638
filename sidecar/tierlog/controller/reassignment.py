"""Moving a partition's replicas to other brokers: Kafka's reassignment (KIP-455), pure.

A reassignment never copies data itself; it widens the replica set so the ordinary
replication does it, and narrows it once that is done:

1. ``start_reassignment``: the partition's replicas become the target's followed by the
   original replicas that leave (``replicas`` = target | original, target first), with
   ``adding_replicas`` = target - original and ``removing_replicas`` = original - target.
   The leader and its epoch stay: the adding replicas are new followers, which fetch
   from the leader like any other and enter the ISR once caught up (the leader's own
   rule, ``LeaderPartition.caught_up``).
2. ``complete_reassignment``: once every target replica is in the ISR, the replicas
   become the target; the ISR shrinks to its target members; a leader that is leaving
   hands over to the first live in-sync target replica in the next leader epoch. A
   leader that stays keeps its epoch (the leaving followers are refused from then on
   because they are no longer replicas), as every other ISR change here.

A new target while a reassignment is under way replaces it, measured from the original
replicas (``replicas`` - ``adding_replicas``), as Kafka's AlterPartitionReassignments
does; the original replicas as target cancel it. Every state these return is written by
compare-and-swap on the partition epoch it was computed from (``changes.write_changes``).
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import replace

from tierlog.api.errors import InvalidReplicaAssignmentError
from tierlog.partition_state.model import NO_LEADER, PartitionState

__all__ = ["complete_reassignment", "original_replicas", "start_reassignment"]


def original_replicas(state: PartitionState) -> tuple[int, ...]:
    """The replicas before the reassignment under way (``replicas`` when none is)."""
    return tuple(r for r in state.replicas if r not in state.adding_replicas)


def start_reassignment(state: PartitionState, target: Sequence[int]) -> PartitionState:
    """The state that moves the partition's replicas towards ``target`` (its first one
    the preferred leader). A target equal to the replicas (or, under way, to the
    original ones) ends up with no reassignment at all.

    ``INVALID_REPLICA_ASSIGNMENT`` for an empty target, a broker named twice or a
    negative id, and when cancelling would leave the partition's only in-sync replica
    (an adding one that leads) out of the replica set."""
    wanted = tuple(target)
    if not wanted or len(set(wanted)) != len(wanted) or min(wanted) < 0:
        raise InvalidReplicaAssignmentError(
            f"target replicas {list(wanted)}: at least one, each a distinct broker id"
        )
    original = original_replicas(state)
    leaving = tuple(r for r in original if r not in wanted)
    replicas = (*wanted, *leaving)
    isr = tuple(r for r in state.isr if r in replicas)
    adding = tuple(r for r in wanted if r not in original)
    leader = state.leader
    if leader not in (NO_LEADER, *replicas):
        # The leader was an adding replica of a target now withdrawn: the first in-sync
        # replica that stays leads instead.
        if not isr:
            raise InvalidReplicaAssignmentError(
                f"replicas {list(replicas)} would hold no in-sync replica: broker "
                f"{state.leader}, which is being withdrawn, is the only one"
            )
        leader = isr[0]
    return _moved(state, replicas, isr, adding, leaving, leader)


def complete_reassignment(state: PartitionState, live: Set[int]) -> PartitionState | None:
    """The partition on its target replicas, once every one of them is in sync and one
    of them can lead; ``None`` while there is no reassignment or it must wait."""
    if not state.reassigning:
        return None
    target = state.target_replicas
    if not set(target) <= set(state.isr):
        return None  # the adding replicas are still catching up
    isr = tuple(r for r in target if r in state.isr)
    if state.leader in target or state.leader == NO_LEADER:
        # An offline partition stays offline: the elections bring it back from the ISR.
        return _moved(state, target, isr, (), (), state.leader)
    candidates = [r for r in target if r in live]
    if not candidates:
        return None  # nobody in the target to lead yet: the old leader keeps it meanwhile
    return _moved(state, target, isr, (), (), candidates[0])


def _moved(
    state: PartitionState,
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    adding: tuple[int, ...],
    removing: tuple[int, ...],
    leader: int,
) -> PartitionState:
    """``state`` on new replicas, in one step (the invariants hold only for the whole);
    a new leader leads in the next leader epoch."""
    epoch = state.leader_epoch + (leader != state.leader)
    return replace(
        state,
        replicas=replicas,
        isr=isr,
        adding_replicas=adding,
        removing_replicas=removing,
        leader=leader,
        leader_epoch=epoch,
    )
