"""Leader elections asked for (Kafka's ElectLeaders), on both stores: the preferred
replica leads again once alive and in sync, an offline partition is led by any live
replica when unclean is asked for, every other case is Kafka's error for it, and a race
lost to another writer is decided again on what won."""

from __future__ import annotations

import pytest

from tests.controller.conftest import OpenStore, RivalFirst
from tierlog.api.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidRequestError,
    PreferredLeaderNotAvailableError,
)
from tierlog.controller.leader_elections import (
    ElectionType,
    TopicOutcomes,
    elect_leaders,
    election_type,
)
from tierlog.partition_state.model import NO_LEADER, PartitionState
from tierlog.storage.errors import UnknownTopicOrPartitionError

PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN
OFF_PREFERRED = PartitionState((1, 2, 3), 2, 4, (1, 2, 3))  # broker 2 leads, 1 is preferred


def _errors(outcomes: list[TopicOutcomes]) -> dict[str, dict[int, type]]:
    return {
        topic: {p: type(error) for p, error in results if error is not None}
        for topic, results in outcomes
    }


def test_the_preferred_replica_is_elected_when_alive_and_in_sync(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    store.create_topic(
        "orders",
        {
            0: OFF_PREFERRED,
            1: PartitionState.new((2, 3, 1)),  # led by its preferred replica already
            2: PartitionState((3, 1, 2), 1, 2, (1, 2)),  # preferred 3 is out of sync
            3: PartitionState((1, 2, 3), 2, 2, (1, 2)),  # preferred 1 is not alive
        },
    )

    outcomes = elect_leaders(store, PREFERRED, [("orders", [0, 1, 2, 3, 9])], live={2, 3})

    assert [p for p, _error in outcomes[0][1]] == [0, 1, 2, 3, 9]  # the request's order
    assert _errors(outcomes) == {
        "orders": {
            0: PreferredLeaderNotAvailableError,  # broker 1 is not alive
            1: ElectionNotNeededError,
            2: PreferredLeaderNotAvailableError,
            3: PreferredLeaderNotAvailableError,
            9: UnknownTopicOrPartitionError,
        }
    }
    # Once broker 1 is alive, it leads partition 0 in the next leader epoch.
    assert elect_leaders(store, PREFERRED, [("orders", [0])], live={1, 2, 3}) == [
        ("orders", [(0, None)])
    ]
    again, _, _ = store_at()
    assert again.read_topic("orders")[0] == PartitionState((1, 2, 3), 1, 5, (1, 2, 3), 1)


def test_every_partition_when_none_is_named_leaving_out_those_already_led(
    store_at: OpenStore,
) -> None:
    store, _, _ = store_at()
    store.create_topic("orders", {0: OFF_PREFERRED, 1: PartitionState.new((2, 3, 1))})
    store.create_topic("audit", {0: PartitionState.new((3, 1, 2))})

    outcomes = elect_leaders(store, PREFERRED, None, live={1, 2, 3})

    assert sorted(outcomes) == [("audit", []), ("orders", [(0, None)])]
    assert store.read_topic("orders")[0].leader == 1


def test_an_unknown_topic_is_unknown_for_each_partition_named(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    outcomes = elect_leaders(store, UNCLEAN, [("nowhere", [0, 1]), ("../x", [0])], live={1})
    assert _errors(outcomes) == {
        "nowhere": {0: UnknownTopicOrPartitionError, 1: UnknownTopicOrPartitionError},
        "../x": {0: UnknownTopicOrPartitionError},  # no topic has it (never a path)
    }


def test_an_unclean_election_leads_an_offline_partition_from_any_live_replica(
    store_at: OpenStore,
) -> None:
    store, _, _ = store_at()
    offline = PartitionState((1, 2, 3), NO_LEADER, 7, (1,))  # its only in-sync replica died
    store.create_topic("orders", {0: offline, 1: PartitionState.new((1, 2)), 2: offline})

    outcomes = elect_leaders(store, UNCLEAN, [("orders", [0, 1])], live={3})

    assert _errors(outcomes) == {"orders": {1: ElectionNotNeededError}}
    # The first live replica, alone in sync (what broker 1 alone had may be lost).
    assert store.read_topic("orders")[0] == PartitionState((1, 2, 3), 3, 8, (3,), 1)
    nobody = elect_leaders(store, UNCLEAN, [("orders", [2])], live={4})
    assert _errors(nobody) == {"orders": {2: EligibleLeadersNotAvailableError}}


def test_an_unclean_election_prefers_a_live_in_sync_replica(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    store.create_topic("orders", {0: PartitionState((1, 2, 3), NO_LEADER, 7, (2, 1))})

    assert elect_leaders(store, UNCLEAN, [("orders", [0])], live={1, 3}) == [
        ("orders", [(0, None)])
    ]
    assert store.read_topic("orders")[0] == PartitionState((1, 2, 3), 1, 8, (1,), 1)


def test_an_election_that_loses_a_race_is_decided_again_on_the_winner(
    store_at: OpenStore,
) -> None:
    """The preferred replica falls out of the ISR between the read and the election:
    the election is refused by the store, re-read, and answered for what won."""
    store, _, _ = store_at()
    rival, _, _ = store_at()
    store.create_topic("orders", {0: OFF_PREFERRED})
    racing = RivalFirst(store, rival, "orders", 0, lambda seen: seen.with_isr((2, 3)))
    racing.armed = True

    outcomes = elect_leaders(racing, PREFERRED, [("orders", [0])], live={1, 2, 3})

    assert _errors(outcomes) == {"orders": {0: PreferredLeaderNotAvailableError}}
    assert store.read_topic("orders")[0] == racing.rival_changes[0]


def test_an_election_type_kafka_lacks_is_an_invalid_request() -> None:
    assert election_type(1) is UNCLEAN
    with pytest.raises(InvalidRequestError, match="unknown election type 2"):
        election_type(2)


def test_every_preferred_election_of_a_topic_goes_in_one_write_per_part(
    store_at: OpenStore,
) -> None:
    """After a broker's return it leads none of its partitions until they are given back
    (the scale benchmark's ElectLeaders of 2,000 partitions, docs/BENCHMARKS.md): the
    elections of a topic are decided on one read and written together, a write per part
    touched, as Kafka's controller commits them in one batch of records."""
    store, _, _ = store_at()
    for topic in ("orders", "clicks"):
        store.create_topic(topic, dict.fromkeys(range(20), OFF_PREFERRED))
    writes = store.part_writes

    outcomes = elect_leaders(store, PREFERRED, None, live={1, 2, 3})

    assert store.part_writes - writes == 2
    assert _errors(outcomes) == {"orders": {}, "clicks": {}}
    for topic in ("orders", "clicks"):
        assert {state.leader for state in store.read_topic(topic).values()} == {1}
