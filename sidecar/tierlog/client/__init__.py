"""tierlog's Python client: producer, consumer and admin client over the gRPC API.

Over gRPC:

- ``producer``: ``Producer.send`` -> ``RecordFuture`` (or a ``callback``), ``flush``, ``close``;
  its ``sender`` thread drives the core below over ``ProduceStream``s; with a
  ``transactional.id``, transactions (``transactions``: ``init_transactions``,
  ``begin_transaction``, ``commit_transaction``, ``abort_transaction``).
- ``consumer``: ``Consumer`` (assign/subscribe, seek by offset or time, ``poll``, and
  with a ``group.id`` committed offsets: ``commit``, ``commit_async``, ``committed``);
  ``aio_consumer``: ``AIOConsumer``, its face for an asyncio event loop.
- ``groups``: a group's coordinator found and followed (``GroupClient``, over
  ``coordinator_client``), and groups as an administrator sees them (``ConsumerGroups``).
- ``admin``: ``AdminClient`` (topics, configs, partitions, metadata).
- ``serialization``: ``SerializingProducer`` / ``DeserializingConsumer`` over them, with
  string, JSON and bytes (de)serializers.
- ``cluster``: channels and who owns each partition (Metadata); ``rpc``: statuses to
  typed errors carrying Kafka's reason names; ``security``: TLS, mutual TLS and the
  bearer token the channels are opened with.

The transport-independent core:

- ``config``: ``ProducerConfig`` / ``ConsumerConfig`` / ``AdminConfig`` under Kafka's
  names and defaults (``CommonClientConfig``: servers and security, shared by all three).
- ``partitioner``: Kafka's default partitioner (murmur2 of the key, sticky for null keys).
- ``producer_batch``: one partition's batch, open for records, then built and stamped.
- ``futures``: one ``ProduceRequestResult`` per batch, a light ``RecordFuture`` per record.
- ``accumulator``: the RecordAccumulator (linger, batch size, compression, buffer.memory).
- ``idempotence``: producer id, epoch and sequences, retries and epoch bumps.

The client depends only on the record codec (``tierlog.storage.records``), the error
vocabulary (``tierlog.storage.errors``) and, for the transport, the generated stubs.
"""

from __future__ import annotations

from tierlog.api.errors import ProducerFencedError
from tierlog.client.accumulator import AppendResult, MemoryBlocked, ReadyCheck, RecordAccumulator
from tierlog.client.admin import AdminClient
from tierlog.client.aio_consumer import AIOConsumer
from tierlog.client.cluster import Cluster
from tierlog.client.config import AdminConfig, CommonClientConfig, ConsumerConfig, ProducerConfig
from tierlog.client.consumer import Consumer, ConsumerRecord, OffsetAndTimestamp
from tierlog.client.errors import (
    BufferExhaustedError,
    ConfigError,
    IllegalProducerStateError,
    NetworkError,
    NoOffsetForPartitionError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    RequestTimedOutError,
    WakeupError,
)
from tierlog.client.groups import (
    ConsumerGroupMetadata,
    ConsumerGroups,
    GroupClient,
    OffsetAndMetadata,
)
from tierlog.client.idempotence import IdempotenceManager, ProducerIdAndEpoch
from tierlog.client.partitioner import StickyPartitioner, murmur2, partition_for_key
from tierlog.client.producer import Callback, Producer, RecordFuture, RecordMetadata
from tierlog.client.producer_batch import ProducerBatch
from tierlog.client.security import ChannelSecurity
from tierlog.client.serialization import (
    DeserializedRecord,
    DeserializingConsumer,
    SerializingProducer,
    bytes_deserializer,
    bytes_serializer,
    json_deserializer,
    json_serializer,
    string_deserializer,
    string_serializer,
)
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "AIOConsumer",
    "AdminClient",
    "AdminConfig",
    "AppendResult",
    "BufferExhaustedError",
    "Callback",
    "ChannelSecurity",
    "Cluster",
    "CommonClientConfig",
    "ConfigError",
    "Consumer",
    "ConsumerConfig",
    "ConsumerGroupMetadata",
    "ConsumerGroups",
    "ConsumerRecord",
    "DeserializedRecord",
    "DeserializingConsumer",
    "GroupClient",
    "IdempotenceManager",
    "IllegalProducerStateError",
    "MemoryBlocked",
    "NetworkError",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OutOfOrderSequenceError",
    "Producer",
    "ProducerBatch",
    "ProducerConfig",
    "ProducerFencedError",
    "ProducerIdAndEpoch",
    "ReadyCheck",
    "RecordAccumulator",
    "RecordFuture",
    "RecordMetadata",
    "RecordTooLargeError",
    "RequestTimedOutError",
    "SerializingProducer",
    "StickyPartitioner",
    "TopicPartition",
    "WakeupError",
    "bytes_deserializer",
    "bytes_serializer",
    "json_deserializer",
    "json_serializer",
    "murmur2",
    "partition_for_key",
    "string_deserializer",
    "string_serializer",
]
