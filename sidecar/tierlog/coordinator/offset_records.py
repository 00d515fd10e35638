"""A committed offset in ``__consumer_offsets``: key (group, topic, partition), value
(offset, leader epoch, metadata, commit time), as Kafka 4.1 reads and writes them.

The key is the same in every version. The value has five versions: 0 (offset, metadata,
commit time), 1 adds an expire time (written only for a commit that carried a retention
time), 2 drops it again, 3 adds the leader epoch, 4 is flexible with the topic id as
tagged field 0. Kafka 4.1 writes 4, or 1 when there is an expire time. A deleted or
expired offset is the key with a null value (a tombstone), which compaction keeps for
``delete.retention.ms`` and then drops.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import ClassVar

from tierlog.coordinator.protocol_types import MessageReader, MessageWriter
from tierlog.coordinator.record_type import CoordinatorRecordType

__all__ = [
    "NO_EXPIRE_TIMESTAMP",
    "NO_LEADER_EPOCH",
    "ZERO_UUID",
    "OffsetCommitKey",
    "OffsetCommitValue",
]

NO_LEADER_EPOCH = -1
NO_EXPIRE_TIMESTAMP = -1
ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: "no topic id"
_TOPIC_ID_TAG = 0


@dataclass(frozen=True)
class OffsetCommitKey:
    """The offset of one partition, committed by one group."""

    RECORD_TYPE: ClassVar[CoordinatorRecordType] = CoordinatorRecordType.OFFSET_COMMIT

    group: str
    topic: str
    partition: int

    def write(self, writer: MessageWriter) -> None:
        writer.string(self.group)
        writer.string(self.topic)
        writer.int32(self.partition)

    @classmethod
    def read(cls, reader: MessageReader) -> OffsetCommitKey:
        return cls(reader.string("group"), reader.string("topic"), reader.int32())


@dataclass(frozen=True)
class OffsetCommitValue:
    """Where the group will resume: ``offset`` is the next record to consume."""

    VERSIONS: ClassVar[range] = range(0, 5)
    FLEXIBLE_VERSIONS: ClassVar[range] = range(4, 5)

    offset: int
    commit_timestamp_ms: int
    metadata: str = ""
    leader_epoch: int = NO_LEADER_EPOCH  # versions 3+
    expire_timestamp_ms: int = NO_EXPIRE_TIMESTAMP  # version 1 only
    topic_id: uuid.UUID = ZERO_UUID  # version 4, tagged

    def default_version(self) -> int:
        return 1 if self.expire_timestamp_ms != NO_EXPIRE_TIMESTAMP else 4

    def write(self, writer: MessageWriter, version: int) -> None:
        writer.int64(self.offset)
        if version >= 3:
            writer.int32(self.leader_epoch)
        writer.string(self.metadata)
        writer.int64(self.commit_timestamp_ms)
        if version == 1:
            writer.int64(self.expire_timestamp_ms)
        if version not in self.FLEXIBLE_VERSIONS:
            return  # no tagged fields: the topic id is left out
        tagged = {} if self.topic_id == ZERO_UUID else {_TOPIC_ID_TAG: self.topic_id.bytes}
        writer.tagged_fields(tagged)

    @classmethod
    def read(cls, reader: MessageReader, version: int) -> OffsetCommitValue:
        offset = reader.int64()
        leader_epoch = reader.int32() if version >= 3 else NO_LEADER_EPOCH
        metadata = reader.string("metadata")
        commit_timestamp_ms = reader.int64()
        expire_timestamp_ms = reader.int64() if version == 1 else NO_EXPIRE_TIMESTAMP
        topic_id = ZERO_UUID
        tagged = reader.tagged_fields()
        if _TOPIC_ID_TAG in tagged:
            tag_reader = MessageReader(tagged[_TOPIC_ID_TAG], flexible=True, what="topic_id")
            topic_id = tag_reader.uuid()
            tag_reader.done()
        return cls(
            offset=offset,
            commit_timestamp_ms=commit_timestamp_ms,
            metadata=metadata,
            leader_epoch=leader_epoch,
            expire_timestamp_ms=expire_timestamp_ms,
            topic_id=topic_id,
        )
