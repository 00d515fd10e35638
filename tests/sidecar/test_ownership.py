"""The static partition assignment: every broker computes the same owner."""

from __future__ import annotations

import pytest

from tierlog.api.errors import NotLeaderOrFollowerError
from tierlog.sidecar.ownership import Broker, Ownership
from tierlog.storage.checkpoints import TopicPartition

BROKERS = (Broker(0, "b0:9092"), Broker(1, "b1:9092"), Broker(2, "b2:9092"))


def test_a_single_broker_owns_everything() -> None:
    alone = Ownership(5, (Broker(5, "me:9092"),))
    assert all(alone.owns(TopicPartition(topic, p)) for topic in "abc" for p in range(10))


def test_brokers_agree_and_spread_each_topics_partitions() -> None:
    views = [Ownership(broker.node_id, BROKERS) for broker in BROKERS]
    for topic in ("orders", "events", "x"):
        tps = [TopicPartition(topic, p) for p in range(6)]
        owners = [views[0].owner(tp) for tp in tps]
        assert all(
            view.owner(tp) == owner for view in views for tp, owner in zip(tps, owners, strict=True)
        )
        assert sorted(owner.node_id for owner in owners) == [0, 0, 1, 1, 2, 2]
        for tp, owner in zip(tps, owners, strict=True):
            assert [view.owns(tp) for view in views].count(True) == 1
            assert views[owner.node_id].owns(tp)


def test_the_others_are_told_who_owns_it() -> None:
    tp = TopicPartition("orders", 0)
    owner = Ownership(0, BROKERS).owner(tp)
    stranger = next(broker for broker in BROKERS if broker != owner)
    with pytest.raises(NotLeaderOrFollowerError) as caught:
        Ownership(stranger.node_id, BROKERS).check(tp)
    assert (caught.value.leader_id, caught.value.leader_address) == (owner.node_id, owner.address)
    assert caught.value.reason == "NOT_LEADER_OR_FOLLOWER"


def test_a_broker_missing_from_the_list_is_refused() -> None:
    with pytest.raises(ValueError, match="not in the cluster"):
        Ownership(9, BROKERS)
