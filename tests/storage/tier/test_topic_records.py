"""Topic records in the object store: one object a topic, read back as written; an
object under ``topics/`` that is not a record is a typed error, never a guessed topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.storage.errors import InvalidTopicError
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.topic_records import (
    CorruptTopicRecordError,
    TopicRecord,
    delete_topic_record,
    load_topic_records,
    put_topic_record,
    topic_record_key,
)


@pytest.fixture
def store(tmp_path: Path) -> LocalDirectoryStore:
    return LocalDirectoryStore(tmp_path / "bucket")


def test_records_read_back_as_written_and_go_when_deleted(store: LocalDirectoryStore) -> None:
    orders = TopicRecord("orders", 6, {"cleanup.policy": "compact"}, "a-topic-id")
    put_topic_record(store, orders)
    put_topic_record(store, TopicRecord("a.b_c-d", 1))
    put_topic_record(store, TopicRecord("orders", 8, orders.configs, orders.topic_id))
    assert load_topic_records(store) == [
        TopicRecord("a.b_c-d", 1),
        TopicRecord("orders", 8, {"cleanup.policy": "compact"}, "a-topic-id"),
    ]
    delete_topic_record(store, "orders")
    delete_topic_record(store, "orders")  # idempotent
    assert [record.name for record in load_topic_records(store)] == ["a.b_c-d"]


def test_a_record_keeps_the_replication_factor_and_an_older_one_reads_without(
    store: LocalDirectoryStore,
) -> None:
    put_topic_record(store, TopicRecord("replicated", 2, {}, "an-id", replication_factor=2))
    older = b'{"version": 1, "name": "older", "partitions": 3, "configs": {}, "topic_id": "x"}'
    store.put(topic_record_key("older"), older)  # as a version before the factor wrote it
    assert load_topic_records(store) == [
        TopicRecord("older", 3, {}, "x", replication_factor=None),
        TopicRecord("replicated", 2, {}, "an-id", replication_factor=2),
    ]


def test_a_record_keeps_each_partitions_replicas_and_an_older_one_reads_without(
    store: LocalDirectoryStore,
) -> None:
    placed = TopicRecord("placed", 2, {}, "an-id", 2, assignment=((2, 0), (0, 1)))
    put_topic_record(store, placed)
    older = b'{"version": 1, "name": "older", "partitions": 1, "configs": {}, "topic_id": "x"}'
    store.put(topic_record_key("older"), older)
    assert load_topic_records(store) == [TopicRecord("older", 1, {}, "x"), placed]


def test_a_name_that_is_not_a_topic_is_no_key() -> None:
    with pytest.raises(InvalidTopicError):
        topic_record_key("..")


@pytest.mark.parametrize(
    "body",
    [
        b"{half",
        b'{"version": 2, "name": "t", "partitions": 1, "configs": {}}',
        b'{"version": 1, "name": "other", "partitions": 1, "configs": {}}',
        b'{"version": 1, "name": "t", "partitions": 0, "configs": {}}',
        b'{"version": 1, "name": "t", "partitions": 1, "configs": []}',
        b'{"version": 1, "name": "t", "partitions": 1, "configs": {}, "replication_factor": 0}',
        b'{"version": 1, "name": "t", "partitions": 1, "configs": {}, "replication_factor": "3"}',
        b'{"version": 1, "name": "t", "partitions": 1, "configs": {}, "assignment": [[0], [1]]}',
        b'{"version": 1, "name": "t", "partitions": 1, "configs": {}, "assignment": [[]]}',
        b'{"version": 1, "name": "t", "partitions": 1, "configs": {}, "assignment": [[1, 1]]}',
        b'{"version": 1, "name": "t", "partitions": 1, "configs": {}, "assignment": [[-1]]}',
        b'{"version": 1, "name": "t", "partitions": 1, "configs": {}, "assignment": [["0"]]}',
        b'{"version": 1, "name": "t", "partitions": 1, "configs": {}, "assignment": [0]}',
        b'{"version": 1, "name": "t", "partitions": 1, "configs": {}, "assignment": {}}',
    ],
)
def test_an_object_that_is_not_a_record_is_a_typed_error(
    store: LocalDirectoryStore, body: bytes
) -> None:
    store.put(topic_record_key("t"), body)
    with pytest.raises(CorruptTopicRecordError, match=r"topics/t\.json"):
        load_topic_records(store)
