"""What a client believes of a topic's leaders (``TopicOwners.newest``): a Metadata answer
naming an older leader epoch for a partition than the one known comes from a broker that
has not caught up with the store, and is not believed for that partition (KIP-320); once
the known epochs are ``metadata.max.age.ms`` old the brokers are believed again, so a
topic deleted and made again (its epochs start over at 0) is followed."""

from __future__ import annotations

from tierlog.client.cluster import LeaderAndEpoch, TopicOwners

TRUST_S = 300.0


def _owners(leaders: list[tuple[str, int]], at: float) -> TopicOwners:
    return TopicOwners(
        "orders",
        tuple(address for address, _epoch in leaders),
        at,
        tuple(epoch for _address, epoch in leaders),
        at,
    )


def _leaders(owners: TopicOwners) -> list[LeaderAndEpoch]:
    return [owners.leader(p) for p in range(owners.partition_count)]


def test_an_older_epoch_is_not_believed_for_its_partition_and_the_rest_is() -> None:
    known = _owners([("b:1", 3), ("c:1", 5), ("a:1", -1)], at=10.0)
    # Partition 0 as a deposed leader still sees it; 1 moved on; 2 had no known epoch.
    fresh = _owners([("a:1", 2), ("b:1", 6), ("c:1", 0)], at=11.0)
    merged = known.newest(fresh, TRUST_S)
    assert _leaders(merged) == [("b:1", 3), ("b:1", 6), ("c:1", 0)]
    assert merged.fetched_monotonic == 11.0  # fresh: not asked again at once
    assert merged.epochs_monotonic == 10.0  # partition 0's epoch was told then


def test_an_answer_with_no_older_epoch_is_taken_whole() -> None:
    known = _owners([("b:1", 3)], at=10.0)
    fresh = _owners([("b:1", 3)], at=11.0)
    assert known.newest(fresh, TRUST_S) is fresh
    offline = _owners([("", -1)], at=11.0)  # no leader right now: asked again later
    assert known.newest(offline, TRUST_S) is offline


def test_past_the_metadata_age_the_brokers_are_believed_a_topic_made_again() -> None:
    known = _owners([("b:1", 3)], at=10.0)
    kept = known.newest(_owners([("a:1", 0)], at=100.0), TRUST_S)
    assert _leaders(kept) == [("b:1", 3)]
    again = _owners([("a:1", 0)], at=10.0 + TRUST_S)
    assert kept.newest(again, TRUST_S) is again


def test_a_new_partition_count_is_taken_whole() -> None:
    known = _owners([("b:1", 3)], at=10.0)
    grown = _owners([("a:1", 0), ("c:1", 0)], at=11.0)
    assert known.newest(grown, TRUST_S) is grown
