"""A classic group's state machine, on a clock the tests move: KIP-394's first round,
the initial delay, rebalances completing when everyone rejoined or their time ran out,
the leader's assignment handed out once written, sessions, static members, leaving, and
the checks on offset commits."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from tierlog.api.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from tierlog.coordinator.classic_group import (
    ClassicGroup,
    ClassicGroupState,
    JoinAnswer,
    JoinRequest,
    Timeouts,
)
from tierlog.coordinator.classic_group_records import GroupMetadataValue

T0 = 1_000_000
DELAY_MS = 100
SESSION_MS = 10_000
REBALANCE_MS = 15_000
TIMEOUTS = Timeouts(initial_rebalance_delay_ms=DELAY_MS)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def request(
    member_id: str = "",
    *,
    instance_id: str | None = None,
    protocols: tuple[tuple[str, bytes], ...] = (("range", b"sub"),),
    protocol_type: str = "consumer",
) -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type=protocol_type,
        protocols=protocols,
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        client_id="client",
        client_host="/127.0.0.1",
    )


def new_member_id(group: ClassicGroup, now_ms: int) -> str:
    with pytest.raises(MemberIdRequiredError) as required:
        group.join(request(), now_ms, TIMEOUTS)
    return required.value.member_id


async def stable_group(*protocols: tuple[str, bytes]) -> tuple[ClassicGroup, str]:
    """A group whose one member joined and synced at generation 1; that member."""
    group = ClassicGroup("g")
    member = new_member_id(group, T0)
    joined = group.join(request(member, protocols=protocols or (("range", b"sub"),)), T0, TIMEOUTS)
    group.expire(T0 + DELAY_MS)
    answer = await joined
    waiter, write = group.sync(member, None, answer.generation, {member: b"all"}, T0 + DELAY_MS)
    assert write
    group.assignment_written(T0 + DELAY_MS)
    assert await waiter == b"all"
    return group, member


def test_a_new_member_gets_its_id_first_then_leads_after_the_initial_delay() -> None:
    async def test() -> None:
        group = ClassicGroup("g")
        member = new_member_id(group, T0)
        assert member.startswith("client-") and group.state == ClassicGroupState.EMPTY
        joined = group.join(request(member), T0, TIMEOUTS)
        assert group.state == ClassicGroupState.PREPARING_REBALANCE
        assert group.next_deadline_ms() == T0 + DELAY_MS
        group.expire(T0 + DELAY_MS - 1)
        assert not joined.done()
        group.expire(T0 + DELAY_MS)
        answer = await joined
        assert answer.generation == 1 and answer.leader == member == answer.member_id
        assert answer.protocol_name == "range" and [m.metadata for m in answer.members] == [b"sub"]
        assert group.state == ClassicGroupState.COMPLETING_REBALANCE
        waiter, write = group.sync(member, None, 1, {member: b"p0"}, T0 + DELAY_MS)
        assert write and not waiter.done()  # answered once the record is written
        group.assignment_written(T0 + DELAY_MS)
        assert await waiter == b"p0" and group.state == ClassicGroupState.STABLE
        value = group.record(T0).value
        assert isinstance(value, GroupMetadataValue)
        assert (value.generation, value.leader, value.protocol) == (1, member, "range")
        assert [(m.member_id, m.assignment) for m in value.members] == [(member, b"p0")]

    run(test)


def test_the_initial_delay_waits_for_a_second_member_and_ends_at_the_rebalance_timeout() -> None:
    async def test() -> None:
        group = ClassicGroup("g")
        first, second = new_member_id(group, T0), new_member_id(group, T0)
        joined_first = group.join(request(first), T0, TIMEOUTS)
        joined_second = group.join(request(second), T0 + DELAY_MS - 1, TIMEOUTS)
        assert group.next_deadline_ms() == T0 + 2 * DELAY_MS - 1  # extended
        group.expire(T0 + 2 * DELAY_MS - 1)
        answers = await asyncio.gather(joined_first, joined_second)
        assert {a.generation for a in answers} == {1}
        assert [len(a.members) for a in answers] == [2, 0]  # only the leader sees them

    run(test)


def test_a_rebalance_completes_once_every_member_rejoined() -> None:
    async def test() -> None:
        group, first = await stable_group()
        second = new_member_id(group, T0 + 1)
        joined_second = group.join(request(second), T0 + 1, TIMEOUTS)
        assert group.state == ClassicGroupState.PREPARING_REBALANCE
        with pytest.raises(RebalanceInProgressError):
            group.heartbeat(first, None, 1, T0 + 2)
        joined_first = group.join(request(first), T0 + 2, TIMEOUTS)
        second_answer, first_answer = await asyncio.gather(joined_second, joined_first)
        assert (first_answer.generation, first_answer.leader) == (2, first)
        assert {m.member_id for m in first_answer.members} == {first, second}
        assert second_answer.members == ()
        with pytest.raises(IllegalGenerationError):
            group.heartbeat(first, None, 1, T0 + 3)

    run(test)


def test_a_member_that_does_not_rejoin_in_the_rebalance_timeout_is_dropped() -> None:
    async def test() -> None:
        group, first = await stable_group()
        second = new_member_id(group, T0 + 1)
        joined_second = group.join(request(second), T0 + 1, TIMEOUTS)
        with pytest.raises(RebalanceInProgressError):  # alive, but does not rejoin
            group.heartbeat(first, None, 1, T0 + SESSION_MS)
        assert group.next_deadline_ms() == T0 + 1 + REBALANCE_MS
        group.expire(T0 + 1 + REBALANCE_MS)
        answer = await joined_second
        assert (answer.generation, answer.leader) == (2, second)
        assert list(group.members) == [second]

    run(test)


def test_the_leader_picks_the_protocol_every_member_supports() -> None:
    async def test() -> None:
        group, first = await stable_group(("range", b"r1"), ("sticky", b"s1"))
        second = new_member_id(group, T0 + 1)
        joined = [
            group.join(request(second, protocols=(("sticky", b"s2"),)), T0 + 1, TIMEOUTS),
            group.join(
                request(first, protocols=(("range", b"r1"), ("sticky", b"s1"))), T0 + 2, TIMEOUTS
            ),
        ]
        answers: list[JoinAnswer] = await asyncio.gather(*joined)
        assert {a.protocol_name for a in answers} == {"sticky"}
        assert sorted(m.metadata for m in answers[1].members) == [b"s1", b"s2"]
        with pytest.raises(InconsistentGroupProtocolError):
            group.join(request(protocols=(("roundrobin", b""),)), T0 + 3, TIMEOUTS)
        with pytest.raises(InconsistentGroupProtocolError):
            group.join(request(protocol_type="connect"), T0 + 3, TIMEOUTS)

    run(test)


def test_a_silent_member_goes_at_its_session_timeout_and_the_group_empties() -> None:
    async def test() -> None:
        group, member = await stable_group()
        assert group.next_deadline_ms() == T0 + DELAY_MS + SESSION_MS
        group.heartbeat(member, None, 1, T0 + SESSION_MS)
        assert group.expire(T0 + DELAY_MS + SESSION_MS) is False
        assert group.expire(T0 + 2 * SESSION_MS) is True
        assert group.state == ClassicGroupState.EMPTY and group.generation == 2
        value = group.record(T0).value
        assert isinstance(value, GroupMetadataValue)
        assert (value.generation, value.protocol, value.leader, value.members) == (
            2,
            None,
            None,
            (),
        )

    run(test)


def test_an_unused_member_id_lapses_after_a_session() -> None:
    async def test() -> None:
        group = ClassicGroup("g")
        member = new_member_id(group, T0)
        group.expire(T0 + SESSION_MS)
        assert group.is_empty()
        with pytest.raises(UnknownMemberIdError):
            group.join(request(member), T0 + SESSION_MS, TIMEOUTS)

    run(test)


def test_a_static_member_coming_back_keeps_its_assignment_and_fences_its_old_id() -> None:
    async def test() -> None:
        group = ClassicGroup("g")
        joined = group.join(request(instance_id="i1"), T0, TIMEOUTS)  # no MEMBER_ID_REQUIRED
        group.expire(T0 + DELAY_MS)
        leader = (await joined).member_id
        other = group.join(request(instance_id="i2"), T0 + DELAY_MS, TIMEOUTS)
        group.join(request(leader, instance_id="i1"), T0 + DELAY_MS, TIMEOUTS)
        second = (await other).member_id
        waiter, _ = group.sync(leader, "i1", 2, {leader: b"a", second: b"b"}, T0 + DELAY_MS)
        group.assignment_written(T0 + DELAY_MS)
        await waiter
        back = await group.join(request(instance_id="i2"), T0 + DELAY_MS + 1, TIMEOUTS)
        assert back.member_id != second and back.generation == 2
        assert group.state == ClassicGroupState.STABLE  # no rebalance for a follower's return
        with pytest.raises(FencedInstanceIdError):
            group.heartbeat(second, "i2", 2, T0 + DELAY_MS + 2)
        synced, write = group.sync(back.member_id, "i2", 2, {}, T0 + DELAY_MS + 2)
        assert not write and await synced == b"b"

    run(test)


def test_leaving_members_rebalance_the_rest_and_the_last_one_empties_it() -> None:
    async def test() -> None:
        group, first = await stable_group()
        second = new_member_id(group, T0 + 1)
        joins = [
            group.join(request(second), T0 + 1, TIMEOUTS),
            group.join(request(first), T0 + 1, TIMEOUTS),
        ]
        await asyncio.gather(*joins)
        assert group.leave(first, None, T0 + 2) is False
        assert group.state == ClassicGroupState.PREPARING_REBALANCE and group.leader == second
        rejoined = await group.join(request(second), T0 + 3, TIMEOUTS)
        assert (rejoined.generation, rejoined.leader) == (3, second)
        with pytest.raises(UnknownMemberIdError):
            group.leave(first, None, T0 + 4)
        assert group.leave(second, None, T0 + 4) is True
        assert group.state == ClassicGroupState.EMPTY

    run(test)


def test_offset_commits_are_checked_against_member_and_generation() -> None:
    async def test() -> None:
        group, member = await stable_group()
        group.check_commit(member, None, 1)
        with pytest.raises(IllegalGenerationError):
            group.check_commit(member, None, 0)
        with pytest.raises(UnknownMemberIdError):
            group.check_commit("stranger", None, 1)
        with pytest.raises(UnknownMemberIdError):
            group.check_commit("", None, -1)  # a group with members takes no anonymous commit
        group.leave(member, None, T0 + 1)
        group.check_commit("", None, -1)  # an Empty group takes one (tools, assign())

    run(test)


def test_transactional_commits_are_checked_against_a_given_member_and_generation() -> None:
    """KIP-447, as Kafka checks a classic group's TxnOffsetCommit: a member and
    generation when given, none needed otherwise, and no refusal mid-rebalance."""

    async def test() -> None:
        group, member = await stable_group()
        group.check_transactional_commit(member, None, 1)
        group.check_transactional_commit("", None, -1)  # a producer not in the group
        with pytest.raises(IllegalGenerationError):
            group.check_transactional_commit(member, None, 0)
        with pytest.raises(UnknownMemberIdError):
            group.check_transactional_commit("stranger", None, 1)
        rejoined = await group.join(request(member), T0 + 1, TIMEOUTS)
        assert group.state == ClassicGroupState.COMPLETING_REBALANCE
        with pytest.raises(RebalanceInProgressError):
            group.check_commit(member, None, rejoined.generation)
        group.check_transactional_commit(member, None, rejoined.generation)

    run(test)
