"""Replica placement: Kafka's striped assignment, its worked examples and its invariants."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.api.errors import InvalidPartitionsError, InvalidReplicationFactorError
from tierlog.replication.placement import (
    Racks,
    assign_new_partitions,
    assign_replicas,
    rack_alternated,
    replicas_without,
)

# The rack-aware example of Kafka's AdminUtils documentation: six brokers on three racks.
KAFKAS_RACKS: Racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_without_racks_leaders_go_round_and_followers_shift_each_round() -> None:
    # Five brokers, ten partitions, three replicas, starting at broker 0 (Kafka's table).
    assignment = assign_replicas(dict.fromkeys(range(5)), 10, 3, start_index=0)
    assert assignment == {
        0: (0, 1, 2),
        1: (1, 2, 3),
        2: (2, 3, 4),
        3: (3, 4, 0),
        4: (4, 0, 1),
        5: (0, 2, 3),  # second round: the followers one further from the leader
        6: (1, 3, 4),
        7: (2, 4, 0),
        8: (3, 0, 1),
        9: (4, 1, 2),
    }


def test_with_racks_brokers_alternate_by_rack_and_each_partition_spans_three() -> None:
    assert rack_alternated(KAFKAS_RACKS) == [0, 3, 1, 5, 4, 2]
    assert assign_replicas(KAFKAS_RACKS, 6, 3, start_index=0) == {
        0: (0, 3, 1),
        1: (3, 1, 5),
        2: (1, 5, 4),
        3: (5, 4, 2),
        4: (4, 2, 0),
        5: (2, 0, 3),
    }


def test_brokers_without_a_rack_are_one_more_rack() -> None:
    racks: Racks = {0: "a", 1: "a", 2: None, 3: None}
    assert rack_alternated(racks) == [0, 2, 1, 3]
    for replicas in assign_replicas(racks, 8, 2, start_index=1).values():
        assert {racks[b] for b in replicas} == {"a", None}


def test_the_start_index_and_shift_decide_everything() -> None:
    brokers: Racks = dict.fromkeys((10, 20, 30, 40))
    once = assign_replicas(brokers, 8, 2, start_index=2, replica_shift=1)
    assert once == assign_replicas(brokers, 8, 2, start_index=2, replica_shift=1)
    assert once[0] == (30, 10)  # leader at index 2, first follower 1 + 1 further on
    assert assign_replicas(brokers, 1, 2, start_index=6, replica_shift=1) == {0: (30, 10)}


def test_added_partitions_continue_the_stripe() -> None:
    created = assign_replicas(KAFKAS_RACKS, 4, 3, start_index=3)
    added = assign_new_partitions(KAFKAS_RACKS, [created[p] for p in range(4)], 9)
    assert {**created, **added} == assign_replicas(KAFKAS_RACKS, 9, 3, start_index=3)


def test_added_partitions_start_at_the_list_head_when_partition_zeros_leader_left() -> None:
    added = assign_new_partitions({1: None, 2: None}, [(7, 1)], 3)
    assert added == {1: (2, 1), 2: (1, 2)}


@pytest.mark.parametrize(("factor", "brokers"), [(0, 3), (-1, 3), (4, 3), (1, 0)])
def test_a_factor_below_one_or_above_the_brokers_is_invalid_replication_factor(
    factor: int, brokers: int
) -> None:
    with pytest.raises(InvalidReplicationFactorError) as caught:
        assign_replicas(dict.fromkeys(range(brokers)), 3, factor, start_index=0)
    assert caught.value.reason == "INVALID_REPLICATION_FACTOR"


def test_partition_counts_are_checked() -> None:
    brokers: Racks = {0: None, 1: None}
    with pytest.raises(InvalidPartitionsError):
        assign_replicas(brokers, 0, 1, start_index=0)
    with pytest.raises(InvalidPartitionsError):
        assign_new_partitions(brokers, [(0,), (1,)], 2)  # does not grow
    with pytest.raises(InvalidPartitionsError):
        assign_new_partitions(brokers, [], 2)  # no topic to grow
    with pytest.raises(ValueError, match="must not be negative"):
        assign_replicas(brokers, 1, 1, start_index=-1)


# -- invariants ------------------------------------------------------------------------


@st.composite
def placements(draw: st.DrawFn, *, equal_racks: bool = False) -> tuple[Racks, int, int, int, int]:
    """(racks, partition count, replication factor, start index, first shift)."""
    if equal_racks:
        rack_count = draw(st.integers(1, 4))
        per_rack = draw(st.integers(1, 4))
        ids = draw(st.lists(st.integers(0, 1000), min_size=rack_count * per_rack, unique=True))
        ids = ids[: rack_count * per_rack]
        racks: Racks = {b: f"rack-{i % rack_count}" for i, b in enumerate(ids)}
    else:
        names = st.one_of(st.none(), st.sampled_from(["a", "b", "c", "d"]))
        racks = draw(st.dictionaries(st.integers(0, 1000), names, min_size=1, max_size=12))
    factor = draw(st.integers(1, len(racks)))
    partitions = draw(st.integers(1, 40))
    start_index = draw(st.integers(0, 50))
    shift = draw(st.integers(0, 50))
    return racks, partitions, factor, start_index, shift


def _assign(placement: tuple[Racks, int, int, int, int]) -> dict[int, tuple[int, ...]]:
    racks, partitions, factor, start_index, shift = placement
    return assign_replicas(racks, partitions, factor, start_index=start_index, replica_shift=shift)


@given(placements())
def test_replicas_are_distinct_brokers_spanning_as_many_racks_as_they_can(
    placement: tuple[Racks, int, int, int, int],
) -> None:
    racks, partitions, factor, _, _ = placement
    assignment = _assign(placement)
    assert sorted(assignment) == list(range(partitions))
    rack_count = len(set(racks.values()))
    for replicas in assignment.values():
        assert len(replicas) == len(set(replicas)) == factor
        assert set(replicas) <= set(racks)
        assert len({racks[b] for b in replicas}) == min(factor, rack_count)


@given(placements())
def test_leaderships_differ_by_at_most_one(placement: tuple[Racks, int, int, int, int]) -> None:
    racks = placement[0]
    leaders = Counter(replicas[0] for replicas in _assign(placement).values())
    counts = [leaders[b] for b in racks]
    assert max(counts) - min(counts) <= 1


@given(placements(equal_racks=True))
def test_with_racks_of_one_size_followers_are_balanced(
    placement: tuple[Racks, int, int, int, int],
) -> None:
    racks, partitions, factor, _, _ = placement
    assignment = _assign(placement)
    followers = Counter(b for replicas in assignment.values() for b in replicas[1:])
    counts = [followers[b] for b in racks]
    # A part round leaves some brokers a follower of up to factor - 1 more partitions;
    # whole rounds give every broker the same share.
    assert max(counts) - min(counts) <= factor - 1
    if partitions % len(racks) == 0:
        rounds = partitions // len(racks)
        assert counts == [rounds * (factor - 1)] * len(racks)


@given(placements(), st.integers(1, 20))
def test_partitions_placed_later_are_placed_as_if_placed_at_once(
    placement: tuple[Racks, int, int, int, int], more: int
) -> None:
    racks, partitions, factor, start_index, shift = placement
    later = assign_replicas(
        racks,
        more,
        factor,
        start_index=start_index,
        replica_shift=shift,
        first_partition=partitions,
    )
    at_once = assign_replicas(
        racks, partitions + more, factor, start_index=start_index, replica_shift=shift
    )
    assert {**_assign(placement), **later} == at_once


def test_leaving_brokers_replicas_are_replaced_in_place_by_the_least_loaded() -> None:
    staying = {0: None, 1: None, 2: None}
    current = {"a-0": (3, 0, 1), "a-1": (0, 1, 2), "a-2": (1, 3, 2), "a-3": (2, 0, 3)}
    moved = replicas_without(staying, current, leaving={3})
    # a-1 has no replica on broker 3: not moved. The others keep their order, with the
    # one staying broker each lacks where broker 3 stood.
    assert moved == {"a-0": (2, 0, 1), "a-2": (1, 0, 2), "a-3": (2, 0, 1)}


def test_a_replacement_goes_to_a_rack_the_partition_does_not_use_yet() -> None:
    racks = {0: "a", 1: "a", 2: "b", 4: "a"}
    current = {"t-0": (0, 3), "t-1": (2, 1), "t-2": (2, 0)}
    moved = replicas_without(racks, current, leaving={3})
    assert moved == {"t-0": (0, 2)}  # rack b, though broker 4 (rack a) holds fewer


def test_more_replicas_than_staying_brokers_is_refused_by_name() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 2 available"):
        replicas_without({0: None, 1: None}, {"t-0": (0, 1, 2)}, leaving={2})
