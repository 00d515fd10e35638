"""Keys and values as objects: serializers for the producer, deserializers for the consumer.

A serializer is any callable from an object to ``bytes`` (or ``None``, a null key or a
tombstone); a deserializer the reverse, as kafka-python's ``key_serializer=`` and
confluent-kafka's ``SerializingProducer`` take them. Ready ones: UTF-8 strings, JSON and
bytes. A null key or value stays null without calling them, as Kafka's serializers map
null to null. ``SerializingProducer`` and ``DeserializingConsumer`` wrap the byte-level
``Producer`` and ``Consumer`` (reachable as ``.producer`` and ``.consumer`` for what they
do not forward) and are generic in the key and value types, so ``mypy`` checks what a
program sends and reads. A value a serializer cannot take raises ``TypeError`` from
``send`` before anything is queued.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Generic, NamedTuple, TypeVar

from tierlog.client.cluster import Cluster
from tierlog.client.config import ConsumerConfig, ProducerConfig
from tierlog.client.consumer import Consumer, ConsumerRecord
from tierlog.client.futures import RecordFuture
from tierlog.client.groups import OffsetAndMetadata
from tierlog.client.producer import Callback, Producer
from tierlog.storage.records import Header
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "DeserializedRecord",
    "DeserializingConsumer",
    "SerializingProducer",
    "bytes_deserializer",
    "bytes_serializer",
    "json_deserializer",
    "json_serializer",
    "string_deserializer",
    "string_serializer",
]

K = TypeVar("K")
V = TypeVar("V")


def string_serializer(value: str) -> bytes:
    """UTF-8, as Kafka's ``StringSerializer``."""
    if not isinstance(value, str):
        raise TypeError(f"the string serializer takes a str, not {type(value).__name__}")
    return value.encode()


def string_deserializer(data: bytes) -> str:
    return data.decode()


def json_serializer(value: object) -> bytes:
    """Compact JSON in UTF-8; ``TypeError`` for what JSON cannot hold."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def json_deserializer(data: bytes) -> Any:
    return json.loads(data)


def bytes_serializer(value: bytes | bytearray | memoryview) -> bytes:
    """Bytes as they are; ``TypeError`` for anything else (a ``str`` included)."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"the bytes serializer takes bytes, not {type(value).__name__}")
    return bytes(value)


def bytes_deserializer(data: bytes) -> bytes:
    return data


class SerializingProducer(Generic[K, V]):
    """A ``Producer`` that sends keys of type ``K`` and values of type ``V``."""

    def __init__(
        self,
        config: ProducerConfig | Mapping[str, object],
        *,
        key_serializer: Callable[[K], bytes],
        value_serializer: Callable[[V], bytes],
        cluster: Cluster | None = None,
    ) -> None:
        self.key_serializer = key_serializer
        self.value_serializer = value_serializer
        self.producer = Producer(config, cluster=cluster)

    def send(
        self,
        topic: str,
        value: V | None,
        key: K | None = None,
        headers: Sequence[Header] = (),
        partition: int | None = None,
        timestamp: int | None = None,
        callback: Callback | None = None,
    ) -> RecordFuture:
        """``Producer.send`` of the serialized key and value (``None`` stays null)."""
        key_bytes = None if key is None else self.key_serializer(key)
        value_bytes = None if value is None else self.value_serializer(value)
        return self.producer.send(
            topic, value_bytes, key_bytes, headers, partition, timestamp, callback
        )

    def flush(self, timeout_s: float | None = None) -> bool:
        return self.producer.flush(timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        self.producer.close(timeout_s)

    def __enter__(self) -> SerializingProducer[K, V]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class DeserializedRecord(NamedTuple, Generic[K, V]):
    """A record as ``DeserializingConsumer.poll`` returns it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: K | None
    value: V | None
    headers: tuple[Header, ...] = ()


class DeserializingConsumer(Generic[K, V]):
    """A ``Consumer`` whose records carry keys of type ``K`` and values of type ``V``."""

    def __init__(
        self,
        config: ConsumerConfig | Mapping[str, object],
        *,
        key_deserializer: Callable[[bytes], K],
        value_deserializer: Callable[[bytes], V],
        cluster: Cluster | None = None,
    ) -> None:
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self.consumer = Consumer(config, cluster=cluster)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self.consumer.assign(partitions)

    def subscribe(self, topic: str) -> list[TopicPartition]:
        return self.consumer.subscribe(topic)

    # Positions and offsets carry no keys or values to deserialize: these are the
    # consumer's own calls, as confluent-kafka's DeserializingConsumer offers them.

    def assignment(self) -> list[TopicPartition]:
        return self.consumer.assignment()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.consumer.seek(tp, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] = ()) -> None:
        self.consumer.seek_to_beginning(partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] = ()) -> None:
        self.consumer.seek_to_end(partitions)

    def position(self, tp: TopicPartition) -> int:
        return self.consumer.position(tp)

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None) -> None:
        self.consumer.commit(offsets)

    def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self.consumer.committed(partitions)

    def poll(self, timeout_ms: int = 0) -> list[DeserializedRecord[K, V]]:
        """``Consumer.poll``, each key and value deserialized (null stays ``None``).

        As Kafka's consumer: when a record cannot be deserialized, the records before it
        are returned, and the partitions are put back at the first record not returned,
        so the next poll raises the deserializer's error at the bad record, whose
        offset the caller can ``seek`` past (on this consumer, as on Kafka's)."""
        polled = self.consumer.poll(timeout_ms)
        done: list[DeserializedRecord[K, V]] = []
        for index, record in enumerate(polled):
            try:
                done.append(
                    DeserializedRecord(
                        record.topic,
                        record.partition,
                        record.offset,
                        record.timestamp,
                        None if record.key is None else self.key_deserializer(record.key),
                        None if record.value is None else self.value_deserializer(record.value),
                        record.headers,
                    )
                )
            except Exception:
                self._put_back(polled[index:])
                if done:
                    return done
                raise
        return done

    def _put_back(self, records: Sequence[ConsumerRecord]) -> None:
        first: dict[TopicPartition, int] = {}
        for record in records:
            first.setdefault(TopicPartition(record.topic, record.partition), record.offset)
        for tp, offset in first.items():
            self.consumer.seek(tp, offset)

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> DeserializingConsumer[K, V]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
