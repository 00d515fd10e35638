"""tierlog's Python client: the transport-independent core of a Kafka-like producer.

- ``config``: ``ProducerConfig`` / ``ConsumerConfig`` under Kafka's names and defaults.
- ``partitioner``: Kafka's default partitioner (murmur2 of the key, sticky for null keys).
- ``producer_batch``: one partition's batch, open for records, then built and stamped.
- ``accumulator``: the RecordAccumulator (linger, batch size, compression, buffer.memory).
- ``idempotence``: producer id, epoch and sequences, retries and epoch bumps.

The client depends only on the record codec (``tierlog.storage.records``), the error
vocabulary (``tierlog.storage.errors``) and, for the transport, the generated stubs.
"""

from __future__ import annotations

from tierlog.client.accumulator import AppendResult, MemoryBlocked, ReadyCheck, RecordAccumulator
from tierlog.client.config import ConsumerConfig, ProducerConfig
from tierlog.client.errors import (
    BufferExhaustedError,
    ConfigError,
    IllegalProducerStateError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from tierlog.client.idempotence import IdempotenceManager, ProducerIdAndEpoch
from tierlog.client.partitioner import StickyPartitioner, murmur2, partition_for_key
from tierlog.client.producer_batch import ProducerBatch, TopicPartition

__all__ = [
    "AppendResult",
    "BufferExhaustedError",
    "ConfigError",
    "ConsumerConfig",
    "IdempotenceManager",
    "IllegalProducerStateError",
    "MemoryBlocked",
    "OutOfOrderSequenceError",
    "ProducerBatch",
    "ProducerConfig",
    "ProducerIdAndEpoch",
    "ReadyCheck",
    "RecordAccumulator",
    "RecordTooLargeError",
    "StickyPartitioner",
    "TopicPartition",
    "murmur2",
    "partition_for_key",
]
