"""The bucket's copy of the tiered topics follows the topic store (real files, a real
local-directory store; failures injected with ``FaultyStore``).

Tiered topics, and only those, have a record; a change rewrites it; a topic turned
untiered (its tier deleted, KIP-950) and a deleted topic lose theirs. A store
that is down never refuses a topic change: what was not written is written at the
next change, or at the start's sync.
"""

from __future__ import annotations

from pathlib import Path
from uuid import NAMESPACE_URL, UUID, uuid5

import pytest

from tests.storage.tier.faults import FaultyStore
from tierlog.broker.topic_mirror import TopicMirror
from tierlog.broker.topics import Topic, TopicStore
from tierlog.storage.config import LogConfig
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.topic_records import TopicRecord, load_topic_records, put_topic_record

TIERED = {"remote.storage.enable": "true"}


def topic_id(name: str) -> UUID:
    return uuid5(NAMESPACE_URL, name)


@pytest.fixture
def store(tmp_path: Path) -> FaultyStore:
    return FaultyStore(LocalDirectoryStore(tmp_path / "bucket"))


def topic_store(
    tmp_path: Path, store: FaultyStore, defaults: LogConfig | None = None
) -> TopicStore:
    defaults = defaults or LogConfig()
    topics = TopicStore([tmp_path / "data"], defaults)
    topics.on_change = TopicMirror(store, defaults, topic_id).changed
    return topics


def records(store: FaultyStore) -> dict[str, TopicRecord]:
    return {record.name: record for record in load_topic_records(store)}


def test_tiered_topics_have_a_record_that_follows_their_changes(
    tmp_path: Path, store: FaultyStore
) -> None:
    topics = topic_store(tmp_path, store)
    topics.create("local", 1, {})
    topics.create("tiered", 2, {**TIERED, "retention.ms": "1000"})
    assert records(store) == {
        "tiered": TopicRecord(
            "tiered", 2, {**TIERED, "retention.ms": "1000"}, str(topic_id("tiered"))
        )
    }
    topics.add_partitions("tiered", 4)
    topics.alter_configs("tiered", {"retention.ms": "2000"}, [])
    assert records(store)["tiered"].partition_count == 4
    assert records(store)["tiered"].configs["retention.ms"] == "2000"

    topics.alter_configs("local", TIERED, [])  # tiered from now on
    assert records(store)["local"].configs == TIERED
    topics.delete("local")
    assert set(records(store)) == {"tiered"}


def test_a_topic_whose_tiering_is_turned_off_loses_its_record_as_its_tier_goes(
    tmp_path: Path, store: FaultyStore
) -> None:
    """KIP-950: ``remote.storage.enable=false`` deletes the tier's copy of the topic
    (``remote.log.delete.on.disable``), so a restore must find no record to make it from;
    ``remote.log.copy.disable`` keeps the tier (read only) and the record."""
    topics = topic_store(tmp_path, store)
    topics.create("read-only", 1, TIERED)
    topics.create("turned-off", 1, TIERED)
    topics.alter_configs("read-only", {"remote.log.copy.disable": "true"}, [])
    turned_off = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    topics.alter_configs("turned-off", turned_off, [])
    assert set(records(store)) == {"read-only"}

    topics.alter_configs("turned-off", TIERED, [])  # on again: tiered from now on
    assert records(store)["turned-off"].configs["remote.storage.enable"] == "true"


def test_the_start_sync_drops_the_record_an_older_version_kept_of_a_topic_turned_off(
    tmp_path: Path, store: FaultyStore
) -> None:
    turned_off = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    TopicStore([tmp_path / "data"], LogConfig()).create("turned-off", 1, turned_off)
    put_topic_record(store, TopicRecord("turned-off", 1, turned_off))  # as it was kept
    put_topic_record(store, TopicRecord("unknown-here", 1, TIERED))  # another broker's
    topics = topic_store(tmp_path, store)
    TopicMirror(store, LogConfig(), topic_id).sync(topics.topics())
    assert set(records(store)) == {"unknown-here"}


def test_a_record_carries_the_replication_factor_the_store_gives_the_topic(
    tmp_path: Path, store: FaultyStore
) -> None:
    """As a replicated broker's replica manager puts what the partition-state store says;
    a reassignment to more replicas is a change the record follows."""
    topics = topic_store(tmp_path, store)
    topics.put(Topic("tiered", 2, TIERED, replication_factor=2))
    assert records(store)["tiered"].replication_factor == 2
    topics.put(Topic("tiered", 2, TIERED, replication_factor=3))
    assert records(store)["tiered"].replication_factor == 3
    topics.create("unreplicated", 1, TIERED)
    assert records(store)["unreplicated"].replication_factor is None
    reread = TopicStore([tmp_path / "data"], LogConfig())  # the factor survives a restart
    assert reread.get("tiered").replication_factor == 3
    assert reread.get("unreplicated").replication_factor is None


def test_a_record_carries_where_the_store_puts_each_partitions_replicas(
    tmp_path: Path, store: FaultyStore
) -> None:
    """A reassignment is a change the record follows; the assignment survives a restart."""
    topics = topic_store(tmp_path, store)
    topics.put(Topic("tiered", 2, TIERED, 2, assignment=((0, 1), (1, 2))))
    assert records(store)["tiered"].assignment == ((0, 1), (1, 2))
    topics.put(Topic("tiered", 2, TIERED, 2, assignment=((2, 0), (1, 2))))
    assert records(store)["tiered"].assignment == ((2, 0), (1, 2))
    reread = TopicStore([tmp_path / "data"], LogConfig())
    assert reread.get("tiered").assignment == ((2, 0), (1, 2))


def test_the_broker_default_makes_a_topic_tiered(tmp_path: Path, store: FaultyStore) -> None:
    topics = topic_store(tmp_path, store, LogConfig.from_properties(TIERED))
    topics.create("by-default", 1, {})
    assert set(records(store)) == {"by-default"}


def test_a_store_that_is_down_refuses_no_change_and_catches_up_later(
    tmp_path: Path, store: FaultyStore
) -> None:
    topics = topic_store(tmp_path, store)
    topics.create("gone", 1, TIERED)
    store.outage()
    topics.create("tiered", 1, TIERED)
    topics.delete("gone")
    assert [topic.name for topic in topics.topics()] == ["tiered"]
    store.heal()
    assert set(records(store)) == {"gone"}  # nothing written while it was down

    topics.create("next", 1, {})  # any change writes what is owed
    assert set(records(store)) == {"tiered"}


def test_the_start_sync_writes_the_records_of_topics_from_before(
    tmp_path: Path, store: FaultyStore
) -> None:
    TopicStore([tmp_path / "data"], LogConfig()).create("older", 3, TIERED)  # no mirror then
    topics = topic_store(tmp_path, store)
    assert records(store) == {}
    mirror = TopicMirror(store, LogConfig(), topic_id)
    mirror.sync(topics.topics())
    assert records(store)["older"].partition_count == 3
