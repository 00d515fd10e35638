"""The topic-id map of Fetch v13+, Metadata and DeleteTopics, over a real topic store: one
map while the topics stay as they are, a new one after each change."""

from __future__ import annotations

import uuid
from pathlib import Path

from tierlog.broker.topics import TopicStore
from tierlog.kafka.topic_names import TopicNames
from tierlog.storage.config import LogConfig


def _topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"test/{name}")


def test_the_map_is_built_once_per_change_of_the_topics(tmp_path: Path) -> None:
    store = TopicStore([tmp_path / "a", tmp_path / "b"], LogConfig())
    store.create("orders", 3, {})
    names = TopicNames()

    first = names.by_id(store, _topic_id)
    assert names.by_id(store, _topic_id) is first  # nothing changed: not built again

    store.create("payments", 1, {})
    grown = names.by_id(store, _topic_id)
    store.delete("orders")
    shrunk = names.by_id(store, _topic_id)
    store.add_partitions("payments", 2)
    regrown = names.by_id(store, _topic_id)

    assert dict(first) == {_topic_id("orders"): "orders"}
    assert dict(grown) == {_topic_id("orders"): "orders", _topic_id("payments"): "payments"}
    assert dict(shrunk) == {_topic_id("payments"): "payments"}
    assert regrown is not shrunk and dict(regrown) == dict(shrunk)
