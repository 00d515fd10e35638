"""Serializers and deserializers: objects in, objects out, over a real sidecar; a value
a serializer cannot take is refused before anything is queued, and a record that cannot
be deserialized stops the consumer at that record, as Kafka's does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tierlog.client import (
    Consumer,
    DeserializedRecord,
    DeserializingConsumer,
    Producer,
    SerializingProducer,
    TopicPartition,
    bytes_deserializer,
    bytes_serializer,
    json_deserializer,
    json_serializer,
    string_deserializer,
    string_serializer,
)

from .conftest import create_topic
from .sidecars import LiveSidecar


def test_the_ready_ones_round_trip_and_refuse_other_types() -> None:
    assert string_deserializer(string_serializer("grüße")) == "grüße"
    document = {"id": 7, "tags": ["a", "ß"], "ok": True, "none": None}
    assert json_serializer(document) == '{"id":7,"tags":["a","ß"],"ok":true,"none":null}'.encode()
    assert json_deserializer(json_serializer(document)) == document
    assert bytes_deserializer(bytes_serializer(bytearray(b"\x00\xff"))) == b"\x00\xff"
    with pytest.raises(TypeError, match="takes a str, not bytes"):
        string_serializer(b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes bytes, not str"):
        bytes_serializer("x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        json_serializer({1, 2})


def _consumer(sidecar: LiveSidecar) -> DeserializingConsumer[str, Any]:
    consumer = DeserializingConsumer(
        {"bootstrap.servers": sidecar.address, "auto.offset.reset": "earliest"},
        key_deserializer=string_deserializer,
        value_deserializer=json_deserializer,
    )
    consumer.assign([TopicPartition("events", 0)])
    return consumer


def test_keys_and_values_go_as_objects_and_come_back_as_objects(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, "events")
    config = {"bootstrap.servers": sidecar.address, "linger.ms": 0}
    with SerializingProducer(
        config, key_serializer=string_serializer, value_serializer=json_serializer
    ) as producer:
        producer.send("events", {"n": 1}, key="user-1", partition=0)
        producer.send("events", None, key="user-1", partition=0)  # a tombstone stays null
        with pytest.raises(TypeError, match="takes a str, not int"):
            producer.send("events", {"n": 2}, key=42, partition=0)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            producer.send("events", {"not", "json"}, key="user-2", partition=0)
        assert producer.flush(30)
    with _consumer(sidecar) as consumer:
        records = consumer.poll(5000)
    assert [(r.offset, r.key, r.value) for r in records] == [
        (0, "user-1", {"n": 1}),
        (1, "user-1", None),
    ]
    with Consumer({"bootstrap.servers": sidecar.address}) as plain:
        assert plain.end_offsets([TopicPartition("events", 0)]) == {TopicPartition("events", 0): 2}


def test_a_record_that_cannot_be_deserialized_stops_the_consumer_at_it(
    sidecar: LiveSidecar,
) -> None:
    create_topic(sidecar.address, "events")
    with Producer({"bootstrap.servers": sidecar.address, "linger.ms": 0}) as producer:
        for value in (b'{"n": 1}', b"not json", b'{"n": 3}'):
            producer.send("events", value, key=b"k", partition=0)
        assert producer.flush(30)
    with _consumer(sidecar) as consumer:
        first: list[DeserializedRecord[str, Any]] = []
        for _ in range(10):  # the first poll may come back before the records do
            first = first or consumer.poll(2000)
        assert [r.value for r in first] == [{"n": 1}]
        with pytest.raises(json.JSONDecodeError):
            consumer.poll(5000)
        with pytest.raises(json.JSONDecodeError):  # still there: nothing skipped quietly
            consumer.poll(5000)
        consumer.consumer.seek(TopicPartition("events", 0), 2)
        assert [(r.offset, r.value) for r in consumer.poll(5000)] == [(2, {"n": 3})]


def test_deserializing_consumer_seeks_past_a_bad_record_commits_and_seeks_to_end(
    sidecar: LiveSidecar,
) -> None:
    """What its docstring tells a user to do, on the consumer itself, as confluent-kafka's
    DeserializingConsumer offers it: seek past the bad record, commit, seek to the end."""
    create_topic(sidecar.address, "ledger")
    config = {"bootstrap.servers": sidecar.address, "linger.ms": 0}
    with Producer(config) as producer:
        for value in (b'{"n": 1}', b"not json", b'{"n": 3}'):
            producer.send("ledger", value, key=b"k", partition=0)
        assert producer.flush(30)
    tp = TopicPartition("ledger", 0)
    group = {
        "bootstrap.servers": sidecar.address,
        "group.id": "ledger-readers",
        "enable.auto.commit": "false",  # only what commit() stores
    }

    def reader(**more: str) -> DeserializingConsumer[str, Any]:
        return DeserializingConsumer(
            {**group, **more},
            key_deserializer=string_deserializer,
            value_deserializer=json_deserializer,
        )

    with reader(**{"auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([tp])
        first: list[DeserializedRecord[str, Any]] = []
        for _ in range(10):  # the first poll may come back before the records do
            first = first or consumer.poll(2000)
        assert [r.value for r in first] == [{"n": 1}]
        with pytest.raises(json.JSONDecodeError):
            consumer.poll(5000)
        consumer.seek(tp, 2)
        assert [(r.offset, r.value) for r in consumer.poll(5000)] == [(2, {"n": 3})]
        consumer.commit()
        committed = consumer.committed([tp])[tp]
        assert committed is not None and committed.offset == 3
        consumer.seek(tp, 0)
        consumer.seek_to_end()
        assert consumer.position(tp) == 3
        with Producer(config) as producer:
            producer.send("ledger", b'{"n": 4}', partition=0)
            assert producer.flush(30)
        assert [(r.offset, r.value) for r in consumer.poll(5000)] == [(3, {"n": 4})]
    with reader() as resumed:
        resumed.assign([tp])
        assert resumed.position(tp) == 3  # where the commit left the group
