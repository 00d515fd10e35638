"""Kafka's elections as pure functions: a partition's next state from the live brokers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.controller.elections import (
    ReplicaLogEnd,
    elect,
    hand_over,
    preferred_leader,
    recover,
)
from tierlog.partition_state.model import NO_LEADER, PartitionState

ORDERS = PartitionState((1, 2, 3), leader=1, leader_epoch=4, isr=(1, 2, 3), partition_epoch=9)


def _state(
    leader: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3)
) -> PartitionState:
    return PartitionState(replicas, leader, 4, isr, 9)


# -- a broker fenced ---------------------------------------------------------------------


def test_a_fenced_follower_leaves_the_isr_and_the_leader_epoch_stays() -> None:
    after = elect(ORDERS, live={1, 2}, unclean=False)
    assert after == ORDERS.with_isr((1, 2))
    assert after is not None and after.leader_epoch == 4


def test_a_fenced_leader_is_replaced_by_the_first_live_isr_member_in_replica_order() -> None:
    state = _state(3, (3, 1, 2), replicas=(3, 2, 1))
    after = elect(state, live={1, 2}, unclean=False)
    assert after == state.with_leader(2, isr=(1, 2))
    assert after is not None and after.leader_epoch == 5


def test_a_live_replica_outside_the_isr_is_not_elected_cleanly() -> None:
    state = _state(1, (1, 3))
    assert elect(state, live={2, 3}, unclean=False) == state.with_leader(3, isr=(3,))


def test_with_no_live_isr_member_the_partition_goes_offline_keeping_its_last_isr() -> None:
    state = _state(1, (1,))
    after = elect(state, live={2, 3}, unclean=False)
    assert after == state.with_leader(NO_LEADER)
    assert after is not None and (after.isr, after.leader_epoch) == ((1,), 5)


def test_the_isr_never_empties_when_every_member_is_fenced_at_once() -> None:
    after = elect(ORDERS, live=set(), unclean=False)
    assert after is not None and (after.leader, after.isr) == (NO_LEADER, (1, 2, 3))


def test_unclean_election_lets_a_live_replica_outside_the_isr_lead_alone() -> None:
    state = _state(1, (1,))
    after = elect(state, live={3, 2}, unclean=True)
    assert after == state.with_leader(2, isr=(2,))


def test_unclean_election_still_prefers_a_live_isr_member() -> None:
    state = _state(1, (1, 3))
    assert elect(state, live={2, 3}, unclean=True) == state.with_leader(3, isr=(3,))


def test_unclean_election_with_no_live_replica_leaves_the_partition_offline() -> None:
    state = _state(1, (1,))
    assert elect(state, live={7}, unclean=True) == state.with_leader(NO_LEADER)


def test_nothing_changes_while_every_isr_member_is_alive() -> None:
    assert elect(ORDERS, live={1, 2, 3}, unclean=False) is None
    assert elect(_state(1, (1,)), live={1}, unclean=True) is None  # 2, 3 out of sync: no change


# -- an offline partition ----------------------------------------------------------------


def test_an_offline_partition_is_led_by_its_isr_member_once_it_is_alive_again() -> None:
    offline = _state(NO_LEADER, (1, 2))
    assert elect(offline, live={3}, unclean=False) is None  # 3 was not in sync: stay offline
    assert elect(offline, live={2, 3}, unclean=False) == offline.with_leader(2, isr=(2,))


def test_an_offline_partition_is_led_by_any_live_replica_under_unclean_election() -> None:
    offline = _state(NO_LEADER, (1,))
    assert elect(offline, live={3}, unclean=True) == offline.with_leader(3, isr=(3,))


def test_an_offline_partition_is_not_led_from_its_isr_by_a_broker_whose_logs_were_lost() -> None:
    """Broker 1's log dir was formatted at its start: the ISR it was left in promises
    records it no longer holds, so it does not lead again; another live ISR member does,
    and a partition with one replica has nothing better than its empty log."""
    offline = _state(NO_LEADER, (1,))
    assert elect(offline, live={1, 2}, unclean=False, lost={1}) is None
    both = _state(NO_LEADER, (1, 2))
    assert elect(both, live={1, 2}, unclean=False, lost={1}) == both.with_leader(2, isr=(2,))
    alone = _state(NO_LEADER, (1,), replicas=(1,))
    assert elect(alone, live={1}, unclean=False, lost={1}) == alone.with_leader(1)
    # A leader's failure is no offline partition: a member that rejoined since leads.
    led = _state(3, (3, 1))
    assert elect(led, live={1}, unclean=False, lost={1}) == led.with_leader(1, isr=(1,))


# -- unclean recovery ---------------------------------------------------------------------


def test_a_lost_log_alone_in_sync_gives_the_partition_to_the_replica_holding_the_most() -> None:
    """The greatest last leader epoch wins, then the greatest log end, then replica
    order; the winner is alone in the ISR, in the next leader epoch."""
    state = _state(1, (1,))
    ahead_in_epoch = {2: ReplicaLogEnd(4, 10), 3: ReplicaLogEnd(3, 50)}
    assert recover(state, 1, ahead_in_epoch) == state.with_leader(2, isr=(2,))
    longer = {2: ReplicaLogEnd(4, 10), 3: ReplicaLogEnd(4, 11)}
    assert recover(state, 1, longer) == state.with_leader(3, isr=(3,))
    equal = {3: ReplicaLogEnd(4, 10), 2: ReplicaLogEnd(4, 10)}
    after = recover(state, 1, equal)
    assert after == state.with_leader(2, isr=(2,))
    assert after is not None and after.leader_epoch == state.leader_epoch + 1


def test_a_lost_log_alone_in_sync_with_no_answer_goes_offline_keeping_its_isr() -> None:
    state = _state(1, (1,))
    assert recover(state, 1, {}) == state.with_leader(NO_LEADER)
    assert recover(state.with_leader(NO_LEADER), 1, {}) is None  # offline already


def test_recovery_leaves_alone_a_single_replica_and_a_partition_with_other_isr_members() -> None:
    """One replica: its empty log is all there is, and it leads. Other ISR members, or
    answers from brokers that are not replicas (or itself): not a recovery to make."""
    assert recover(_state(1, (1,), replicas=(1,)), 1, {}) is None
    assert recover(_state(1, (1, 2)), 1, {2: ReplicaLogEnd(4, 10)}) is None
    assert recover(_state(2, (2,)), 1, {3: ReplicaLogEnd(4, 10)}) is None
    state = _state(1, (1,))
    strangers = {1: ReplicaLogEnd(9, 99), 7: ReplicaLogEnd(9, 99)}
    assert recover(state, 1, strangers) == state.with_leader(NO_LEADER)


# -- controlled shutdown -----------------------------------------------------------------


def test_a_stopping_leader_hands_over_to_another_live_isr_member_and_leaves_the_isr() -> None:
    after = hand_over(ORDERS, broker=1, live={1, 3})
    assert after == ORDERS.with_leader(3, isr=(2, 3))


def test_a_stopping_follower_leaves_the_isr_and_the_leader_keeps_its_epoch() -> None:
    assert hand_over(ORDERS, broker=2, live={1, 2, 3}) == ORDERS.with_isr((1, 3))


@pytest.mark.parametrize(
    ("state", "live"),
    [
        (_state(1, (1,)), {1, 2, 3}),  # the only ISR member: nobody to hand over to
        (_state(1, (1, 2)), {1, 3}),  # the other ISR member is not alive
        (_state(2, (2, 3)), {1, 2, 3}),  # broker 1 is not in the ISR
        (_state(NO_LEADER, (1,)), {1}),  # the last ISR member of an offline partition
    ],
)
def test_a_stopping_broker_that_cannot_hand_over_changes_nothing(
    state: PartitionState, live: set[int]
) -> None:
    assert hand_over(state, broker=1, live=live) is None


# -- preferred leader --------------------------------------------------------------------


def test_the_preferred_replica_leads_again_once_alive_and_in_sync() -> None:
    state = _state(2, (2, 1))
    assert preferred_leader(state, live={1, 2}) == state.with_leader(1)


@pytest.mark.parametrize(
    ("state", "live"),
    [
        (_state(1, (1, 2)), {1, 2}),  # already leading
        (_state(2, (2, 3)), {1, 2, 3}),  # not in sync yet
        (_state(2, (2, 1)), {2}),  # not alive
    ],
)
def test_the_preferred_replica_does_not_take_over_otherwise(
    state: PartitionState, live: set[int]
) -> None:
    assert preferred_leader(state, live) is None


# -- every rule keeps the invariants -----------------------------------------------------


@st.composite
def _states(draw: st.DrawFn) -> PartitionState:
    replicas = tuple(draw(st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True)))
    isr = tuple(draw(st.lists(st.sampled_from(replicas), unique=True)))
    leader = draw(st.sampled_from((*isr, NO_LEADER)))
    return PartitionState(replicas, leader, draw(st.integers(0, 1000)), isr, 0)


_LIVE = st.frozensets(st.integers(0, 6))


def _check_change(before: PartitionState, after: PartitionState | None) -> None:
    if after is None:
        return
    assert after != before
    # constructing it checked: the leader is NO_LEADER or in the ISR, the ISR in replicas
    assert after.leader in (*after.isr, NO_LEADER)
    assert after.replicas == before.replicas
    assert after.leader_epoch == before.leader_epoch + (after.leader != before.leader)
    assert after.isr or not before.isr


@given(_states(), _LIVE, st.booleans())
def test_an_election_keeps_every_invariant(
    state: PartitionState, live: frozenset[int], unclean: bool
) -> None:
    after = elect(state, live, unclean)
    _check_change(state, after)
    final = after or state
    assert final.leader == NO_LEADER or final.leader in live
    if after is not None and after.leader not in (NO_LEADER, state.leader):
        # a clean election picks from the old ISR; only an unclean one may not
        assert after.leader in state.isr or (unclean and not set(state.isr) & live)
    if any(replica in live for replica in state.isr):
        assert final.leader != NO_LEADER  # a live ISR member always leads
    assert elect(final, live, unclean) is None  # one step reaches the fixed point


@given(_states(), st.integers(0, 6), _LIVE)
def test_a_hand_over_keeps_every_invariant(
    state: PartitionState, broker: int, live: frozenset[int]
) -> None:
    after = hand_over(state, broker, live)
    _check_change(state, after)
    if after is not None:
        assert broker not in after.isr and after.leader != broker
        assert set(after.isr) < set(state.isr)


@given(_states(), _LIVE)
def test_a_preferred_election_keeps_every_invariant(
    state: PartitionState, live: frozenset[int]
) -> None:
    after = preferred_leader(state, live)
    _check_change(state, after)
    if after is not None:
        assert (after.leader, after.isr) == (state.replicas[0], state.isr)


@given(_states(), _LIVE, _LIVE)
def test_a_clean_election_never_leads_an_offline_partition_by_a_lost_log(
    state: PartitionState, live: frozenset[int], lost: frozenset[int]
) -> None:
    after = elect(state, live, unclean=False, lost=lost)
    _check_change(state, after)
    final = after or state
    if state.leader == NO_LEADER and len(state.replicas) > 1:
        assert final.leader not in lost
    assert elect(final, live, unclean=False, lost=lost) is None


_ENDS = st.dictionaries(
    st.integers(0, 6), st.builds(ReplicaLogEnd, st.integers(-1, 9), st.integers(0, 99))
)


@given(_states(), st.integers(0, 6), _ENDS)
def test_a_recovery_keeps_every_invariant(
    state: PartitionState, broker: int, answers: dict[int, ReplicaLogEnd]
) -> None:
    after = recover(state, broker, answers)
    _check_change(state, after)
    if after is None:
        return
    assert state.isr == (broker,) and len(state.replicas) > 1
    if after.leader == NO_LEADER:
        assert after.isr == state.isr
        assert not set(answers) & set(state.replicas) - {broker}
    else:
        assert after.isr == (after.leader,) and after.leader != broker
        assert answers[after.leader] == max(
            end for r, end in answers.items() if r in state.replicas and r != broker
        )
