"""The bucket's copy of the tiered topics follows the topic store (real files, a real
local-directory store; failures injected with ``FaultyStore``).

Tiered topics, and only those, have a record; a change rewrites it; a topic turned
untiered keeps a record of its last config; a deleted topic's record goes. A store
that is down never refuses a topic change: what was not written is written at the
next change, or at the start's sync.
"""

from __future__ import annotations

from pathlib import Path
from uuid import NAMESPACE_URL, UUID, uuid5

import pytest

from tests.storage.tier.faults import FaultyStore
from tierlog.broker.topic_mirror import TopicMirror
from tierlog.broker.topics import TopicStore
from tierlog.storage.config import LogConfig
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.topic_records import TopicRecord, load_topic_records

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
    turned_off = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    topics.alter_configs("tiered", turned_off, [])
    assert records(store)["local"].configs == TIERED
    assert records(store)["tiered"].configs["remote.storage.enable"] == "false"

    topics.delete("tiered")
    assert set(records(store)) == {"local"}


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
