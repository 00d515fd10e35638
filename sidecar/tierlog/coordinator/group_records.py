"""The records of ``__consumer_offsets``: keys and values to bytes and back.

A record's key is an int16 record type and the key's fields (never flexible); its
value an int16 schema version and the value's fields, or null for a tombstone: the
key's previous values are deleted, and compaction eventually drops the key. Which value
belongs to a key follows from the key's type. Decoding refuses, with typed errors,
bytes that are cut short or run on (``CorruptRecordError``), a record type this
coordinator does not know (``UnknownRecordTypeError``: Kafka's loader skips those, as
leftovers of another version) and a value version outside its schema's
(``UnknownRecordVersionError``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tierlog.coordinator.classic_group_records import GroupMetadataKey, GroupMetadataValue
from tierlog.coordinator.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from tierlog.coordinator.errors import UnknownRecordTypeError
from tierlog.coordinator.offset_records import OffsetCommitKey, OffsetCommitValue
from tierlog.coordinator.protocol_types import MessageReader, MessageWriter
from tierlog.coordinator.record_type import CoordinatorRecordType
from tierlog.coordinator.versioned_value import (
    VERSION_BYTES,
    decode_versioned,
    encode_versioned,
    version_of,
)
from tierlog.storage.errors import CorruptRecordError, InvalidRecordError

__all__ = [
    "CoordinatorRecord",
    "RecordKey",
    "RecordValue",
    "decode_key",
    "decode_record",
    "decode_value",
    "encode_key",
    "encode_record",
    "encode_value",
]

RecordKey = (
    OffsetCommitKey
    | GroupMetadataKey
    | ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)
RecordValue = (
    OffsetCommitValue
    | GroupMetadataValue
    | ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)

# Each key type, the value type that goes with it.
_VALUE_TYPES: dict[type[RecordKey], type[RecordValue]] = {
    OffsetCommitKey: OffsetCommitValue,
    GroupMetadataKey: GroupMetadataValue,
    ConsumerGroupMetadataKey: ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey: ConsumerGroupPartitionMetadataValue,
    ConsumerGroupMemberMetadataKey: ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMetadataKey: ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey: ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupCurrentMemberAssignmentKey: ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupRegularExpressionKey: ConsumerGroupRegularExpressionValue,
}
# Record type -> key type; the legacy offset commit (type 0) reads as today's.
_KEY_TYPES: dict[int, type[RecordKey]] = {
    CoordinatorRecordType.LEGACY_OFFSET_COMMIT: OffsetCommitKey,
    **{key_type.RECORD_TYPE: key_type for key_type in _VALUE_TYPES},
}


@dataclass(frozen=True)
class CoordinatorRecord:
    """One record of ``__consumer_offsets``; ``value`` None is a tombstone.
    ``value_version`` None means the version Kafka 4.1 writes for this value."""

    key: RecordKey
    value: RecordValue | None
    value_version: int | None = None

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


def encode_key(key: RecordKey) -> bytes:
    writer = MessageWriter(flexible=False)
    writer.int16(key.RECORD_TYPE)
    key.write(writer)
    return writer.to_bytes()


def encode_value(value: RecordValue, version: int | None = None) -> bytes:
    """The value's bytes at ``version`` (by default the one Kafka 4.1 writes)."""
    return encode_versioned(value, version)


def encode_record(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    """The key and value bytes of a record (value None for a tombstone)."""
    if record.value is None:
        return encode_key(record.key), None
    expected = _VALUE_TYPES[type(record.key)]
    if not isinstance(record.value, expected):
        raise InvalidRecordError(
            f"a {type(record.key).__name__} takes a {expected.__name__}, "
            f"not a {type(record.value).__name__}"
        )
    return encode_key(record.key), encode_value(record.value, record.value_version)


def decode_key(data: bytes) -> RecordKey:
    record_type = version_of(data, "a record key")
    key_type = _KEY_TYPES.get(record_type)
    if key_type is None:
        raise UnknownRecordTypeError(f"unknown coordinator record type {record_type}")
    reader = MessageReader(data[VERSION_BYTES:], flexible=False, what=key_type.__name__)
    key = key_type.read(reader)
    reader.done()
    return key


def decode_value(key: RecordKey, data: bytes) -> tuple[RecordValue, int]:
    """The value that goes with ``key``, and the version it was written at."""
    return decode_versioned(_VALUE_TYPES[type(key)], data)


def decode_record(key: bytes | None, value: bytes | None) -> CoordinatorRecord:
    """A record's key and value bytes, as stored in a v2 record, decoded."""
    if key is None:
        raise CorruptRecordError("a __consumer_offsets record without a key")
    decoded_key = decode_key(key)
    if value is None:
        return CoordinatorRecord(decoded_key, None)
    decoded_value, version = decode_value(decoded_key, value)
    return CoordinatorRecord(decoded_key, decoded_value, version)
