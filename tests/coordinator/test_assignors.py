"""The server-side assignors: every subscribed partition goes to exactly one subscriber;
``uniform`` balances and is sticky, ``range`` cuts each topic in contiguous ranges."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.api.errors import UnsupportedAssignorError
from tierlog.coordinator.assignment import Assignment, TopicIdPartition
from tierlog.coordinator.assignors import (
    GroupSpec,
    MemberSpec,
    RangeAssignor,
    UniformAssignor,
    assignor_named,
)

ORDERS, PAYMENTS, AUDIT = (uuid.UUID(int=n) for n in (1, 2, 3))
TOPICS = (ORDERS, PAYMENTS, AUDIT)


def tps(topic: uuid.UUID, *partitions: int) -> Assignment:
    return frozenset(TopicIdPartition(topic, p) for p in partitions)


def group(
    counts: dict[uuid.UUID, int], members: dict[str, tuple[frozenset[uuid.UUID], Assignment]]
) -> GroupSpec:
    return GroupSpec({m: MemberSpec(topics, had) for m, (topics, had) in members.items()}, counts)


def check_complete(spec: GroupSpec, result: dict[str, Assignment]) -> None:
    """Each existing subscribed partition is given once, to a member subscribed to it."""
    assert set(result) == set(spec.members)
    given_out = [tp for parts in result.values() for tp in parts]
    assert len(given_out) == len(set(given_out))
    for member_id, parts in result.items():
        assert all(tp.topic_id in spec.members[member_id].subscribed_topic_ids for tp in parts)
    wanted = {
        tp
        for topic_id in spec.partition_counts
        if spec.subscribers(topic_id)
        for tp in spec.partitions_of(topic_id)
    }
    assert set(given_out) == wanted


# -- uniform ----------------------------------------------------------------------------


def test_uniform_splits_six_partitions_three_and_three() -> None:
    both = frozenset({ORDERS})
    spec = group({ORDERS: 6}, {"a": (both, frozenset()), "b": (both, frozenset())})
    result = UniformAssignor().assign(spec)
    check_complete(spec, result)
    assert sorted(len(parts) for parts in result.values()) == [3, 3]


def test_uniform_moves_only_what_a_joining_member_takes() -> None:
    subscribed = frozenset({ORDERS})
    had_a, had_b = tps(ORDERS, 0, 1, 2), tps(ORDERS, 3, 4, 5)
    spec = group(
        {ORDERS: 6},
        {
            "a": (subscribed, had_a),
            "b": (subscribed, had_b),
            "c": (subscribed, frozenset()),
        },
    )
    result = UniformAssignor().assign(spec)
    check_complete(spec, result)
    assert [len(result[m]) for m in "abc"] == [2, 2, 2]
    assert result["a"] <= had_a and result["b"] <= had_b


def test_uniform_gives_a_departed_members_partitions_to_the_others_only() -> None:
    subscribed = frozenset({ORDERS})
    spec = group(
        {ORDERS: 6},
        {"a": (subscribed, tps(ORDERS, 0, 1)), "b": (subscribed, tps(ORDERS, 2, 3))},
    )
    result = UniformAssignor().assign(spec)
    check_complete(spec, result)
    assert result["a"] >= tps(ORDERS, 0, 1) and result["b"] >= tps(ORDERS, 2, 3)


def test_uniform_drops_partitions_of_topics_no_longer_subscribed_or_gone() -> None:
    spec = group(
        {ORDERS: 2},
        {"a": (frozenset({ORDERS}), tps(ORDERS, 0, 1, 7) | tps(PAYMENTS, 0))},
    )
    assert UniformAssignor().assign(spec) == {"a": tps(ORDERS, 0, 1)}


def test_uniform_with_different_subscriptions_gives_each_only_its_topics() -> None:
    spec = group(
        {ORDERS: 4, PAYMENTS: 2},
        {
            "a": (frozenset({ORDERS}), frozenset()),
            "b": (frozenset({ORDERS, PAYMENTS}), frozenset()),
        },
    )
    result = UniformAssignor().assign(spec)
    check_complete(spec, result)
    assert sorted(len(parts) for parts in result.values()) == [3, 3]


members_strategy = st.dictionaries(
    st.sampled_from([f"m{i}" for i in range(8)]),
    st.tuples(
        st.frozensets(st.sampled_from(TOPICS), min_size=1),
        st.frozensets(
            st.builds(TopicIdPartition, st.sampled_from(TOPICS), st.integers(0, 9)), max_size=8
        ),
    ),
    min_size=1,
)
counts_strategy = st.fixed_dictionaries({topic: st.integers(0, 8) for topic in TOPICS})


@settings(max_examples=300, deadline=None)
@given(counts_strategy, members_strategy)
def test_uniform_is_complete_and_balanced_for_any_group(
    counts: dict[uuid.UUID, int], members: dict[str, tuple[frozenset[uuid.UUID], Assignment]]
) -> None:
    spec = group(counts, members)
    result = UniformAssignor().assign(spec)
    check_complete(spec, result)
    same = len({topics for topics, _had in members.values()}) == 1
    if same:
        sizes = [len(parts) for parts in result.values()]
        assert max(sizes) - min(sizes) <= 1


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40), st.integers(1, 7))
def test_uniform_moves_each_partition_at_most_once_and_as_few_as_balance_needs(
    partitions: int, members: int
) -> None:
    """A group that was balanced gets one more member: only the newcomer gains, and it
    gains exactly its share, each partition coming from one previous owner."""
    subscribed = frozenset({ORDERS})
    before_spec = group(
        {ORDERS: partitions}, {f"m{i}": (subscribed, frozenset()) for i in range(members)}
    )
    before = UniformAssignor().assign(before_spec)
    spec = group(
        {ORDERS: partitions},
        {
            **{m: (subscribed, parts) for m, parts in before.items()},
            "new": (subscribed, frozenset()),
        },
    )
    after = UniformAssignor().assign(spec)
    check_complete(spec, after)
    for member_id, parts in before.items():
        assert after[member_id] <= parts
    moved = sum(len(parts - after[m]) for m, parts in before.items())
    assert moved == len(after["new"]) == partitions // (members + 1)


@settings(max_examples=200, deadline=None)
@given(counts_strategy, members_strategy)
def test_uniform_keeps_a_balanced_valid_target_as_it_is(
    counts: dict[uuid.UUID, int], members: dict[str, tuple[frozenset[uuid.UUID], Assignment]]
) -> None:
    first = UniformAssignor().assign(group(counts, members))
    again_spec = group(counts, {m: (members[m][0], first[m]) for m in members})
    assert UniformAssignor().assign(again_spec) == first


# -- range ------------------------------------------------------------------------------


def test_range_cuts_each_topic_in_ranges_the_first_members_one_longer() -> None:
    subscribed = frozenset({ORDERS, PAYMENTS})
    spec = group(
        {ORDERS: 7, PAYMENTS: 7},
        {m: (subscribed, frozenset()) for m in ("c", "a", "b")},
    )
    result = RangeAssignor().assign(spec)
    check_complete(spec, result)
    assert result["a"] == tps(ORDERS, 0, 1, 2) | tps(PAYMENTS, 0, 1, 2)
    assert result["b"] == tps(ORDERS, 3, 4) | tps(PAYMENTS, 3, 4)
    assert result["c"] == tps(ORDERS, 5, 6) | tps(PAYMENTS, 5, 6)


def test_range_gives_nothing_to_members_beyond_the_partitions() -> None:
    subscribed = frozenset({ORDERS})
    spec = group({ORDERS: 1}, {m: (subscribed, frozenset()) for m in ("a", "b")})
    assert RangeAssignor().assign(spec) == {"a": tps(ORDERS, 0), "b": frozenset()}


@settings(max_examples=300, deadline=None)
@given(counts_strategy, members_strategy)
def test_range_is_complete_for_any_group(
    counts: dict[uuid.UUID, int], members: dict[str, tuple[frozenset[uuid.UUID], Assignment]]
) -> None:
    spec = group(counts, members)
    check_complete(spec, RangeAssignor().assign(spec))


# -- by name ----------------------------------------------------------------------------


def test_assignors_by_name_and_an_unknown_one_is_unsupported() -> None:
    assert assignor_named(None).name == "uniform"
    assert assignor_named("range").name == "range"
    with pytest.raises(UnsupportedAssignorError) as caught:
        assignor_named("sticky")
    assert caught.value.reason == "UNSUPPORTED_ASSIGNOR"
