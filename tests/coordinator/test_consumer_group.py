"""A KIP-848 group driven by heartbeats, its records replayed as the coordinator would
after writing them: members join, leave and die in any order, and no partition is ever
consumed by two members; the group settles on a complete, balanced assignment; the
records rebuild the same group; Kafka's errors for bad epochs and ids."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.api.errors import (
    FencedMemberEpochError,
    GroupMaxSizeReachedError,
    InvalidRequestError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from tierlog.coordinator.assignment import EMPTY_ASSIGNMENT, Assignment, TopicIdPartition
from tierlog.coordinator.consumer_group import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    GroupState,
    Heartbeat,
    HeartbeatAnswer,
    TopicInfo,
    answer_topics,
)
from tierlog.coordinator.group_records import CoordinatorRecord, decode_record, encode_record

ORDERS = TopicInfo(uuid.UUID(int=1), 6)
TOPICS = {"orders": ORDERS}
SESSION_MS = 45_000


def apply(group: ConsumerGroup, records: list[CoordinatorRecord]) -> None:
    """What the coordinator does once the log acknowledged the records (through their
    bytes, so what is replayed is what a reload reads)."""
    for record in records:
        group.replay(decode_record(*encode_record(record)))


@dataclass
class Client:
    """A consumer as KIP-848 runs one: it consumes what the last answer assigned, and
    reports what it consumes."""

    member_id: str
    epoch: int = JOIN_EPOCH
    owned: Assignment = EMPTY_ASSIGNMENT
    instance_id: str | None = None
    moves: list[Assignment] = field(default_factory=list)

    def heartbeat(
        self, group: ConsumerGroup, topics: dict[str, TopicInfo] = TOPICS
    ) -> HeartbeatAnswer:
        request = Heartbeat(
            self.member_id,
            self.epoch,
            instance_id=self.instance_id,
            subscribed_topic_names=("orders",) if self.epoch == JOIN_EPOCH else None,
            owned=self.owned,
        )
        records, answer = group.heartbeat(request, topics, max_size=100)
        apply(group, records)
        self.epoch = answer.member_epoch
        self.moves.append(answer.assignment - self.owned)
        self.owned = answer.assignment  # revokes what is gone, takes what is new
        return answer


def settle(
    group: ConsumerGroup, clients: list[Client], topics: dict[str, TopicInfo] = TOPICS
) -> None:
    for _ in range(10):
        for client in clients:
            client.heartbeat(group, topics)
        if group.state() == GroupState.STABLE:
            return
    raise AssertionError(f"the group did not settle: {group.state()}")


def all_partitions(info: TopicInfo = ORDERS) -> Assignment:
    return frozenset(TopicIdPartition(info.topic_id, p) for p in range(info.partition_count))


def test_two_members_split_six_partitions_and_a_third_takes_two_each_moving_once() -> None:
    group = ConsumerGroup("g")
    a, b = Client("a"), Client("b")
    settle(group, [a, b])
    assert sorted([len(a.owned), len(b.owned)]) == [3, 3]
    assert a.owned | b.owned == all_partitions()
    before = {"a": a.owned, "b": b.owned}

    c = Client("c")
    settle(group, [a, b, c])
    assert [len(x.owned) for x in (a, b, c)] == [2, 2, 2]
    assert a.owned <= before["a"] and b.owned <= before["b"]
    assert c.owned == (before["a"] - a.owned) | (before["b"] - b.owned)
    assert group.group_epoch == 3 and group.target_epoch == 3


def test_a_partition_moves_only_after_its_owner_reported_it_revoked() -> None:
    group = ConsumerGroup("g")
    a = Client("a")
    settle(group, [a])
    assert a.owned == all_partitions()
    b = Client("b")
    answer = b.heartbeat(group)
    assert answer.assignment == EMPTY_ASSIGNMENT  # everything is still a's
    assert group.state() == GroupState.RECONCILING
    a.heartbeat(group)  # told to give three up
    assert len(a.owned) == 3
    b.heartbeat(group)  # a has not reported them gone yet
    assert b.owned == EMPTY_ASSIGNMENT
    a.heartbeat(group)  # a reports it no longer owns them
    b.heartbeat(group)
    assert len(b.owned) == 3 and not (a.owned & b.owned)


def test_leaving_gives_the_partitions_to_the_others_and_an_empty_group_is_empty() -> None:
    group = ConsumerGroup("g")
    a, b = Client("a"), Client("b")
    settle(group, [a, b])
    records, answer = group.heartbeat(Heartbeat("b", LEAVE_EPOCH), TOPICS, max_size=100)
    apply(group, records)
    assert answer.member_epoch == LEAVE_EPOCH and group.members == ["a"]
    settle(group, [a])
    assert a.owned == all_partitions()
    records, _answer = group.heartbeat(Heartbeat("a", LEAVE_EPOCH), TOPICS, max_size=100)
    apply(group, records)
    assert group.state() == GroupState.EMPTY and group.owners == {}


def test_a_static_member_that_left_comes_back_to_its_partitions_without_a_rebalance() -> None:
    group = ConsumerGroup("g")
    a, b = Client("a", instance_id="pod-0"), Client("b", instance_id="pod-1")
    settle(group, [a, b])
    epoch, kept = group.group_epoch, a.owned
    records, answer = group.heartbeat(
        Heartbeat("a", STATIC_LEAVE_EPOCH, instance_id="pod-0"), TOPICS, max_size=100
    )
    apply(group, records)
    assert answer.member_epoch == STATIC_LEAVE_EPOCH
    # Its partitions stay held: the other member does not get them meanwhile.
    b.heartbeat(group)
    assert not (b.owned & kept)
    again = Client("a2", instance_id="pod-0")
    again.heartbeat(group)
    assert again.owned == kept and group.group_epoch == epoch
    assert group.members == ["a2", "b"]


def test_a_static_member_back_after_the_target_changed_reconciles_to_it() -> None:
    """While a static member is away (-2) a third member joins: the target moves the
    away member's share; back, it gives up what it no longer has and the group settles."""
    group = ConsumerGroup("g")
    a, b = Client("a", instance_id="pod-0"), Client("b", instance_id="pod-1")
    settle(group, [a, b])
    records, _answer = group.heartbeat(
        Heartbeat("a", STATIC_LEAVE_EPOCH, instance_id="pod-0"), TOPICS, max_size=100
    )
    apply(group, records)
    c = Client("c")
    for _ in range(3):
        b.heartbeat(group)
        c.heartbeat(group)
    again = Client("a2", instance_id="pod-0")
    settle(group, [again, b, c])
    assert sorted(len(x.owned) for x in (again, b, c)) == [2, 2, 2]
    assert again.owned | b.owned | c.owned == all_partitions()


def test_a_live_static_members_instance_id_is_unreleased() -> None:
    group = ConsumerGroup("g")
    settle(group, [Client("a", instance_id="pod-0")])
    with pytest.raises(UnreleasedInstanceIdError) as caught:
        group.heartbeat(
            Heartbeat("z", JOIN_EPOCH, instance_id="pod-0", subscribed_topic_names=("orders",)),
            TOPICS,
            max_size=100,
        )
    assert caught.value.reason == "UNRELEASED_INSTANCE_ID"


def test_bad_member_ids_and_epochs_get_kafkas_errors() -> None:
    group = ConsumerGroup("g")
    a = Client("a")
    settle(group, [a])
    with pytest.raises(UnknownMemberIdError):
        group.heartbeat(Heartbeat("nobody", 1), TOPICS, max_size=100)
    with pytest.raises(FencedMemberEpochError):
        group.heartbeat(Heartbeat("a", a.epoch + 1), TOPICS, max_size=100)
    Client("b").heartbeat(group)
    a.heartbeat(group)
    a.heartbeat(group)
    assert a.epoch == 2
    # The previous epoch is still taken while it owns no more than its assignment...
    group.heartbeat(Heartbeat("a", 1, owned=a.owned), TOPICS, max_size=100)
    # ...but not with partitions it was told to give up, nor an older epoch.
    with pytest.raises(FencedMemberEpochError):
        group.heartbeat(Heartbeat("a", 1, owned=all_partitions()), TOPICS, max_size=100)
    with pytest.raises(FencedMemberEpochError) as caught:
        group.heartbeat(Heartbeat("a", 0 - 5), TOPICS, max_size=100)
    assert caught.value.reason == "FENCED_MEMBER_EPOCH"


def test_a_full_group_refuses_a_new_member_and_a_join_needs_a_subscription() -> None:
    group = ConsumerGroup("g")
    settle(group, [Client("a")])
    join = Heartbeat("b", JOIN_EPOCH, subscribed_topic_names=("orders",))
    with pytest.raises(GroupMaxSizeReachedError):
        group.heartbeat(join, TOPICS, max_size=1)
    with pytest.raises(InvalidRequestError):
        group.heartbeat(Heartbeat("b", JOIN_EPOCH), TOPICS, max_size=10)
    with pytest.raises(UnsupportedAssignorError):
        group.heartbeat(
            Heartbeat("b", JOIN_EPOCH, subscribed_topic_names=("orders",), server_assignor="x"),
            TOPICS,
            max_size=10,
        )


def test_a_regex_subscription_follows_new_topics() -> None:
    group = ConsumerGroup("g")
    request = Heartbeat("a", JOIN_EPOCH, subscribed_topic_regex="orders.*")
    records, answer = group.heartbeat(request, TOPICS, max_size=10)
    apply(group, records)
    assert answer.assignment == all_partitions()
    more = {
        **TOPICS,
        "orders-eu": TopicInfo(uuid.UUID(int=2), 2),
        "audit": TopicInfo(uuid.UUID(int=3), 1),
    }
    records, answer = group.heartbeat(
        Heartbeat("a", answer.member_epoch, owned=answer.assignment), more, max_size=10
    )
    apply(group, records)
    assert answer_topics(answer.assignment, more) == {
        "orders": [0, 1, 2, 3, 4, 5],
        "orders-eu": [0, 1],
    }


def test_members_not_heard_from_for_a_session_expire_and_are_removed() -> None:
    group = ConsumerGroup("g")
    a, b = Client("a"), Client("b")
    settle(group, [a, b])
    group.touch("a", 10_000)
    group.touch("b", 20_000)
    assert group.expired_members(54_999, SESSION_MS) == []
    assert group.expired_members(55_000, SESSION_MS) == ["a"]
    apply(group, group.remove("a", TOPICS))
    settle(group, [b])
    assert b.owned == all_partitions()


def test_a_member_that_keeps_partitions_past_its_rebalance_timeout_is_removed() -> None:
    group = ConsumerGroup("g")
    join = Heartbeat(
        "a", JOIN_EPOCH, subscribed_topic_names=("orders",), rebalance_timeout_ms=10_000
    )
    records, answer = group.heartbeat(join, TOPICS, max_size=10)
    apply(group, records)
    group.touch("a", 0)
    Client("b").heartbeat(group)
    group.touch("b", 0)
    stubborn = Heartbeat("a", answer.member_epoch, owned=all_partitions())
    for now_ms in (1_000, 5_000):  # told to revoke three, it reports all six still
        records, _answer = group.heartbeat(stubborn, TOPICS, max_size=10)
        apply(group, records)
        group.touch("a", now_ms)
        group.touch("b", now_ms)
    assert group.expired_members(10_999, SESSION_MS) == []
    assert group.expired_members(11_000, SESSION_MS) == ["a"]


def test_replaying_the_records_rebuilds_the_same_group() -> None:
    group = ConsumerGroup("g")
    written: list[CoordinatorRecord] = []
    clients = [Client("a"), Client("b"), Client("c")]
    for client in clients:
        request = Heartbeat(client.member_id, JOIN_EPOCH, subscribed_topic_names=("orders",))
        records, answer = group.heartbeat(request, TOPICS, max_size=10)
        apply(group, records)
        written += records
        client.epoch, client.owned = answer.member_epoch, answer.assignment
    loaded = ConsumerGroup("g")
    apply(loaded, written)
    assert (loaded.group_epoch, loaded.target_epoch) == (group.group_epoch, group.target_epoch)
    assert loaded.subscriptions == group.subscriptions
    assert loaded.targets == group.targets and loaded.current == group.current
    assert loaded.owners == group.owners


# -- any sequence -------------------------------------------------------------------------

actions = st.lists(
    st.tuples(
        st.sampled_from(["join", "heartbeat", "leave", "static-leave", "die", "expire"]),
        st.integers(0, 3),
    ),
    max_size=80,
)


@settings(max_examples=400, deadline=None)
@given(actions, st.integers(1, 9))
def test_no_partition_is_ever_consumed_by_two_members(
    steps: list[tuple[str, int]], partitions: int
) -> None:
    """Slots 0 and 2 are static members (``pod-<slot>``): leaving with -2 keeps their
    partitions for the next incarnation; dying leaves their instance id unreleased until
    the session expires."""
    topics = {"orders": TopicInfo(ORDERS.topic_id, partitions)}
    group = ConsumerGroup("g")
    live: dict[int, Client] = {}
    gone: set[str] = set()  # died, or left with -2: removed when their session expires
    generation = 0
    for action, slot in steps:
        client = live.get(slot)
        if action == "join" and client is None:
            generation += 1
            instance_id = f"pod-{slot}" if slot % 2 == 0 else None
            client = Client(f"c{slot}-{generation}", instance_id=instance_id)
            try:
                client.heartbeat(group, topics)
                live[slot] = client
            except UnreleasedInstanceIdError:
                pass  # its previous incarnation died and has not expired yet
        elif action == "heartbeat" and client is not None:
            client.heartbeat(group, topics)
        elif action == "leave" and client is not None:
            leave = Heartbeat(client.member_id, LEAVE_EPOCH)
            records, _ = group.heartbeat(leave, topics, max_size=100)
            apply(group, records)
            del live[slot]
        elif action == "static-leave" and client is not None and client.instance_id:
            leave = Heartbeat(client.member_id, STATIC_LEAVE_EPOCH, instance_id=client.instance_id)
            records, _ = group.heartbeat(leave, topics, max_size=100)
            apply(group, records)
            gone.add(client.member_id)
            del live[slot]
        elif action == "die" and client is not None:
            gone.add(client.member_id)  # stops heartbeating; its session will expire
            del live[slot]
        elif action == "expire":
            for member_id in sorted(gone & set(group.members)):
                apply(group, group.remove(member_id, topics))
            gone.clear()
        consuming = [c.owned for c in live.values()]
        assert sum(len(owned) for owned in consuming) == len(frozenset().union(*consuming))
        held = [member.held for member in group.current.values()]
        assert sum(map(len, held)) == len(frozenset().union(*held))
        # The coordinator's view covers what every live client consumes.
        for c in live.values():
            assert all(group.owners.get(tp) == c.member_id for tp in c.owned)
    for member_id in sorted(gone & set(group.members)):
        apply(group, group.remove(member_id, topics))
    if live:
        settle(group, list(live.values()), topics)
        owned = [c.owned for c in live.values()]
        assert frozenset().union(*owned) == all_partitions(topics["orders"])
        assert max(map(len, owned)) - min(map(len, owned)) <= 1


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5), st.integers(1, 24))
def test_a_joining_member_moves_each_partition_at_most_once(members: int, partitions: int) -> None:
    topics = {"orders": TopicInfo(ORDERS.topic_id, partitions)}
    group = ConsumerGroup("g")
    clients = [Client(f"m{i}") for i in range(members)]
    settle(group, clients, topics)
    for client in clients:
        client.moves.clear()
    newcomer = Client("new")
    settle(group, [*clients, newcomer], topics)
    gained = [tp for client in [*clients, newcomer] for move in client.moves for tp in move]
    assert len(gained) == len(set(gained)) == len(newcomer.owned)
