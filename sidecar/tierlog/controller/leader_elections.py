"""Leader elections an administrator asks for: Kafka's ElectLeaders (KIP-460).

The controller's passes elect when they must (a leader fenced, an offline partition's
in-sync replica back) and, under ``auto.leader.rebalance.enable``, hand preferred
replicas their leadership back. Here the same elections are asked for, per partition:

- PREFERRED: the first replica leads, once it is alive and in the ISR
  (``elections.preferred_leader``); ELECTION_NOT_NEEDED when it already leads,
  PREFERRED_LEADER_NOT_AVAILABLE when it is not alive or not in sync.
- UNCLEAN: an offline partition is led by its first live in-sync replica or, with none,
  by its first live replica with an ISR of itself (``elections.elect`` with unclean
  allowed, whatever the topic's ``unclean.leader.election.enable``: asking is the
  permission, as in Kafka). Committed records that replica lacks are lost.
  ELECTION_NOT_NEEDED when the partition has a leader, ELIGIBLE_LEADERS_NOT_AVAILABLE
  when none of its replicas is alive.

Any broker may ask, with no controller to forward to (a KRaft broker forwards
ElectLeaders to its controller): each election is a compare-and-swap on the partition
epoch it was decided on, decided again when another change wins, so it never undoes
what the controller did meanwhile; a topic's elections are decided on one read and
written together (``write_all_decided``), a write per part of the topic they touch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set
from enum import IntEnum

from tierlog.api.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidRequestError,
    PreferredLeaderNotAvailableError,
)
from tierlog.controller.changes import write_all_decided
from tierlog.controller.elections import elect, preferred_leader
from tierlog.partition_state.model import NO_LEADER, PartitionState
from tierlog.partition_state.store import Partitions, PartitionStateStore
from tierlog.storage.errors import (
    InvalidTopicError,
    TierlogError,
    UnknownTopicOrPartitionError,
)

__all__ = [
    "AskedPartitions",
    "ElectionType",
    "TopicOutcomes",
    "elect_leaders",
    "election_type",
]


class ElectionType(IntEnum):
    """Kafka's election types, by their wire values."""

    PREFERRED = 0
    UNCLEAN = 1


# (topic, partitions) pairs as the request names them.
AskedPartitions = Sequence[tuple[str, Sequence[int]]]
# (topic, [(partition, its error or None: elected)]), in the request's order.
TopicOutcomes = tuple[str, list[tuple[int, TierlogError | None]]]


def election_type(value: int) -> ElectionType:
    """The election type a request names; INVALID_REQUEST for one Kafka lacks."""
    try:
        return ElectionType(value)
    except ValueError:
        raise InvalidRequestError(f"unknown election type {value}") from None


def elect_leaders(
    store: PartitionStateStore,
    election: ElectionType,
    asked: AskedPartitions | None,
    live: Set[int],
) -> list[TopicOutcomes]:
    """Elect the ``asked`` partitions' leaders (None: every partition of every topic,
    leaving out those that need no election, as Kafka does); ``live`` are the brokers
    that may lead. Blocking (the store's I/O)."""
    if asked is None:
        everything = []
        for topic in store.list_topics():
            try:
                partitions = store.read_topic(topic)
            except UnknownTopicOrPartitionError:
                partitions = {}  # deleted since it was listed
            outcomes = _elect_in_topic(store, topic, partitions, sorted(partitions), election, live)
            needed = [(p, error) for p, error in outcomes if not _not_needed(error)]
            everything.append((topic, needed))
        return everything
    return [(topic, _elect_asked(store, topic, ps, election, live)) for topic, ps in asked]


def _elect_asked(
    store: PartitionStateStore,
    topic: str,
    indexes: Sequence[int],
    election: ElectionType,
    live: Set[int],
) -> list[tuple[int, TierlogError | None]]:
    try:
        partitions = store.read_topic(topic)
    except InvalidTopicError as bad_name:  # no topic has it: unknown, as Kafka answers
        unknown = UnknownTopicOrPartitionError(str(bad_name))
        return [(index, unknown) for index in indexes]
    except TierlogError as error:  # no such topic, or its state unreadable
        return [(index, error) for index in indexes]
    return _elect_in_topic(store, topic, partitions, indexes, election, live)


def _elect_in_topic(
    store: PartitionStateStore,
    topic: str,
    partitions: Partitions,
    indexes: Sequence[int],
    election: ElectionType,
    live: Set[int],
) -> list[tuple[int, TierlogError | None]]:
    decide, cause = _ELECTIONS[election]
    errors: dict[int, TierlogError] = {}

    def decide_now(partition: int, state: PartitionState) -> PartitionState | None:
        try:
            return decide(state, live)
        except TierlogError as error:
            errors[partition] = error
            return None

    asked = {index: partitions[index] for index in indexes if index in partitions}
    elected = {c.partition for c in write_all_decided(store, topic, asked, decide_now, cause)}

    def outcome(index: int) -> TierlogError | None:
        if index in elected:
            return None
        if index in errors:
            return errors[index]
        if index in partitions:
            return UnknownTopicOrPartitionError(f"{topic}-{index} was deleted meanwhile")
        return UnknownTopicOrPartitionError(f"no partition {topic}-{index}")

    return [(index, outcome(index)) for index in indexes]


def _not_needed(error: TierlogError | None) -> bool:
    return isinstance(error, ElectionNotNeededError)


def _preferred(state: PartitionState, live: Set[int]) -> PartitionState:
    preferred = state.replicas[0]
    if state.leader == preferred:
        raise ElectionNotNeededError(f"its preferred replica {preferred} leads it")
    after = preferred_leader(state, live)
    if after is None:
        raise PreferredLeaderNotAvailableError(
            f"its preferred replica {preferred} is not alive and in sync "
            f"(ISR {list(state.isr)}, live brokers {sorted(live)})"
        )
    return after


def _unclean(state: PartitionState, live: Set[int]) -> PartitionState:
    if state.leader != NO_LEADER:
        raise ElectionNotNeededError(f"broker {state.leader} leads it")
    after = elect(state, live, unclean=True)
    if after is None or after.leader == NO_LEADER:
        raise EligibleLeadersNotAvailableError(
            f"none of its replicas {list(state.replicas)} is alive"
        )
    return after


# Each election's decision, and the cause its log line gives.
_ELECTIONS: dict[ElectionType, tuple[Callable[[PartitionState, Set[int]], PartitionState], str]] = {
    ElectionType.PREFERRED: (_preferred, "preferred leader election (ElectLeaders)"),
    ElectionType.UNCLEAN: (_unclean, "leader election with unclean allowed (ElectLeaders)"),
}
