"""The records of ``__transaction_state``: one per transactional id, as Kafka 4.1 writes them.

The key is an int16 version (0, the only one) and the transactional id. The value is an
int16 version and the transaction's metadata: its producer id and epoch, timeout, state
(an int8, Kafka's ``TransactionState`` ids), the partitions it wrote to grouped by topic
(null while Empty, as Kafka writes it), and when it started and last changed. Version 1
is flexible and carries three tagged fields, each written only when it differs from its
default: the previous producer id (tag 0) and the next one (tag 1), which follow a
producer id through an epoch exhaustion, and the client's transaction version (tag 2).
Kafka 4.1 writes version 1 (transaction version 1 and later), version 0 only for a
cluster at transaction version 0. A transactional id expired by the coordinator is its
key with a null value.

A key of another version is ``UnknownRecordTypeError`` (Kafka's loader skips it as
another version's); a value version outside 0-1 is ``UnknownRecordVersionError``; a state
byte Kafka does not define is corrupt.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

from tierlog.coordinator.errors import UnknownRecordTypeError
from tierlog.coordinator.protocol_types import MessageReader, MessageWriter
from tierlog.coordinator.versioned_value import (
    VERSION_BYTES,
    decode_versioned,
    encode_versioned,
    version_of,
)
from tierlog.storage.errors import CorruptRecordError

__all__ = [
    "NO_PRODUCER_ID",
    "TransactionLogKey",
    "TransactionLogRecord",
    "TransactionLogValue",
    "TransactionPartitions",
    "TransactionState",
    "decode_transaction_record",
    "encode_transaction_record",
]

NO_PRODUCER_ID = -1
_KEY_VERSION = 0
_PREVIOUS_PRODUCER_ID_TAG, _NEXT_PRODUCER_ID_TAG, _CLIENT_TRANSACTION_VERSION_TAG = 0, 1, 2


class TransactionState(IntEnum):
    """A transaction's state, numbered as Kafka's ``TransactionState`` ids."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """Kafka's name of the state (``PrepareCommit``), as its tools print it."""
        return "".join(part.title() for part in self.name.split("_"))


@dataclass(frozen=True)
class TransactionPartitions:
    """The partitions of one topic a transaction wrote to."""

    topic: str
    partition_ids: tuple[int, ...]

    def write(self, writer: MessageWriter) -> None:
        writer.string(self.topic)
        writer.array(self.partition_ids, MessageWriter.int32)
        writer.tagged_fields()

    @classmethod
    def read(cls, reader: MessageReader) -> TransactionPartitions:
        topic = reader.string("topic")
        partition_ids = tuple(reader.array("partition_ids", MessageReader.int32))
        reader.tagged_fields()
        return cls(topic, partition_ids)


@dataclass(frozen=True)
class TransactionLogKey:
    transactional_id: str


@dataclass(frozen=True)
class TransactionLogValue:
    """A transactional id's producer and its current (or last) transaction."""

    VERSIONS: ClassVar[range] = range(0, 2)
    FLEXIBLE_VERSIONS: ClassVar[range] = range(1, 2)

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    partitions: tuple[TransactionPartitions, ...] | None
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID  # version 1, tagged
    next_producer_id: int = NO_PRODUCER_ID  # version 1, tagged
    client_transaction_version: int = 0  # version 1, tagged

    def default_version(self) -> int:
        return 1

    def write(self, writer: MessageWriter, version: int) -> None:
        writer.int64(self.producer_id)
        writer.int16(self.producer_epoch)
        writer.int32(self.transaction_timeout_ms)
        writer.int8(self.state)
        writer.nullable_array(self.partitions, lambda out, topic: topic.write(out))
        writer.int64(self.last_update_timestamp_ms)
        writer.int64(self.start_timestamp_ms)
        if version in self.FLEXIBLE_VERSIONS:
            writer.tagged_fields(self._tagged_fields())

    def _tagged_fields(self) -> dict[int, bytes]:
        tagged: dict[int, bytes] = {}
        for tag, value, default, width in (
            (_PREVIOUS_PRODUCER_ID_TAG, self.previous_producer_id, NO_PRODUCER_ID, 8),
            (_NEXT_PRODUCER_ID_TAG, self.next_producer_id, NO_PRODUCER_ID, 8),
            (_CLIENT_TRANSACTION_VERSION_TAG, self.client_transaction_version, 0, 2),
        ):
            if value != default:
                field = MessageWriter(flexible=True)
                (field.int64 if width == 8 else field.int16)(value)
                tagged[tag] = field.to_bytes()
        return tagged

    @classmethod
    def read(cls, reader: MessageReader, version: int) -> TransactionLogValue:
        producer_id = reader.int64()
        producer_epoch = reader.int16()
        transaction_timeout_ms = reader.int32()
        state_id = reader.int8()
        partitions = reader.nullable_array(TransactionPartitions.read)
        last_update_timestamp_ms = reader.int64()
        start_timestamp_ms = reader.int64()
        tagged = reader.tagged_fields()
        try:
            state = TransactionState(state_id)
        except ValueError:
            what = f"TransactionLogValue: no transaction state {state_id}"
            raise CorruptRecordError(what) from None
        return cls(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transaction_timeout_ms=transaction_timeout_ms,
            state=state,
            partitions=None if partitions is None else tuple(partitions),
            last_update_timestamp_ms=last_update_timestamp_ms,
            start_timestamp_ms=start_timestamp_ms,
            previous_producer_id=_tagged_int(tagged, _PREVIOUS_PRODUCER_ID_TAG, NO_PRODUCER_ID),
            next_producer_id=_tagged_int(tagged, _NEXT_PRODUCER_ID_TAG, NO_PRODUCER_ID),
            client_transaction_version=_tagged_int(tagged, _CLIENT_TRANSACTION_VERSION_TAG, 0),
        )


def _tagged_int(tagged: dict[int, bytes], tag: int, default: int) -> int:
    if tag not in tagged:
        return default
    reader = MessageReader(tagged[tag], flexible=True, what=f"TransactionLogValue tag {tag}")
    value = reader.int16() if tag == _CLIENT_TRANSACTION_VERSION_TAG else reader.int64()
    reader.done()
    return value


@dataclass(frozen=True)
class TransactionLogRecord:
    """One record of ``__transaction_state``; ``value`` None is a tombstone.
    ``value_version`` None means the version Kafka 4.1 writes."""

    key: TransactionLogKey
    value: TransactionLogValue | None
    value_version: int | None = None


def encode_transaction_record(record: TransactionLogRecord) -> tuple[bytes, bytes | None]:
    """The key and value bytes of a record (value None for a tombstone)."""
    key = MessageWriter(flexible=False)
    key.int16(_KEY_VERSION)
    key.string(record.key.transactional_id)
    if record.value is None:
        return key.to_bytes(), None
    return key.to_bytes(), encode_versioned(record.value, record.value_version)


def decode_transaction_record(key: bytes | None, value: bytes | None) -> TransactionLogRecord:
    """A record's key and value bytes, as stored in a v2 record, decoded."""
    if key is None:
        raise CorruptRecordError("a __transaction_state record without a key")
    key_version = version_of(key, "a TransactionLogKey")
    if key_version != _KEY_VERSION:
        raise UnknownRecordTypeError(f"TransactionLogKey version {key_version}")
    reader = MessageReader(key[VERSION_BYTES:], flexible=False, what="TransactionLogKey")
    decoded_key = TransactionLogKey(reader.string("transactional_id"))
    reader.done()
    if value is None:
        return TransactionLogRecord(decoded_key, None)
    decoded_value, version = decode_versioned(TransactionLogValue, value)
    return TransactionLogRecord(decoded_key, decoded_value, version)
