"""A consumer group of Kafka's next-generation protocol (KIP-848) in
``__consumer_offsets``, as Kafka 4.1 keeps it: one record per fact, each replaced as a
whole, so the coordinator rebuilds a group by replaying the partition.

- the group's epoch (``ConsumerGroupMetadata``), bumped when its members or
  subscriptions change, with the hash of the subscribed topics' metadata (4.1);
- each member's subscription (``ConsumerGroupMemberMetadata``);
- the target assignment: its epoch (``ConsumerGroupTargetAssignmentMetadata``) and each
  member's target partitions (``ConsumerGroupTargetAssignmentMember``);
- each member's current assignment and reconciliation state
  (``ConsumerGroupCurrentMemberAssignment``): what it owns, what it must still revoke;
- the topics a subscribed regular expression resolved to
  (``ConsumerGroupRegularExpression``);
- the subscribed topics' metadata (``ConsumerGroupPartitionMetadata``), which 4.1 only
  reads and deletes: its hash in the group's epoch record replaced it.

Every value has one version, 0, flexible. Partitions are named by topic id. A member
leaving, or a group being deleted, writes its keys with null values (tombstones).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Self

from tierlog.coordinator.protocol_types import MessageReader, MessageWriter
from tierlog.coordinator.record_type import CoordinatorRecordType

__all__ = [
    "ClassicMemberMetadata",
    "ClassicProtocol",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "MemberState",
    "PartitionMetadata",
    "TopicMetadata",
    "TopicPartitions",
]

_CLASSIC_MEMBER_METADATA_TAG = 0
_METADATA_HASH_TAG = 0


def _read_tag(data: bytes, what: str) -> MessageReader:
    return MessageReader(data, flexible=True, what=what)


# --- keys: a group, or a member of a group ----------------------------------------------------


@dataclass(frozen=True)
class _GroupKey:
    group_id: str

    def write(self, writer: MessageWriter) -> None:
        writer.string(self.group_id)

    @classmethod
    def read(cls, reader: MessageReader) -> Self:
        return cls(reader.string("group_id"))


@dataclass(frozen=True)
class _MemberKey:
    group_id: str
    member_id: str

    def write(self, writer: MessageWriter) -> None:
        writer.string(self.group_id)
        writer.string(self.member_id)

    @classmethod
    def read(cls, reader: MessageReader) -> Self:
        return cls(reader.string("group_id"), reader.string("member_id"))


@dataclass(frozen=True)
class ConsumerGroupMetadataKey(_GroupKey):
    RECORD_TYPE: ClassVar[CoordinatorRecordType] = CoordinatorRecordType.CONSUMER_GROUP_METADATA


@dataclass(frozen=True)
class ConsumerGroupPartitionMetadataKey(_GroupKey):
    RECORD_TYPE: ClassVar[CoordinatorRecordType] = (
        CoordinatorRecordType.CONSUMER_GROUP_PARTITION_METADATA
    )


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMetadataKey(_GroupKey):
    RECORD_TYPE: ClassVar[CoordinatorRecordType] = (
        CoordinatorRecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA
    )


@dataclass(frozen=True)
class ConsumerGroupMemberMetadataKey(_MemberKey):
    RECORD_TYPE: ClassVar[CoordinatorRecordType] = (
        CoordinatorRecordType.CONSUMER_GROUP_MEMBER_METADATA
    )


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMemberKey(_MemberKey):
    RECORD_TYPE: ClassVar[CoordinatorRecordType] = (
        CoordinatorRecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER
    )


@dataclass(frozen=True)
class ConsumerGroupCurrentMemberAssignmentKey(_MemberKey):
    RECORD_TYPE: ClassVar[CoordinatorRecordType] = (
        CoordinatorRecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT
    )


@dataclass(frozen=True)
class ConsumerGroupRegularExpressionKey:
    RECORD_TYPE: ClassVar[CoordinatorRecordType] = (
        CoordinatorRecordType.CONSUMER_GROUP_REGULAR_EXPRESSION
    )

    group_id: str
    regular_expression: str

    def write(self, writer: MessageWriter) -> None:
        writer.string(self.group_id)
        writer.string(self.regular_expression)

    @classmethod
    def read(cls, reader: MessageReader) -> ConsumerGroupRegularExpressionKey:
        return cls(reader.string("group_id"), reader.string("regular_expression"))


# --- values: one version each, flexible ------------------------------------------------------


class _VersionZero:
    VERSIONS: ClassVar[range] = range(0, 1)
    FLEXIBLE_VERSIONS: ClassVar[range] = range(0, 1)

    def default_version(self) -> int:
        return 0


@dataclass(frozen=True)
class ConsumerGroupMetadataValue(_VersionZero):
    """The group's epoch; ``metadata_hash`` (tagged, 0 when unset) of its topics."""

    epoch: int
    metadata_hash: int = 0

    def write(self, writer: MessageWriter, version: int) -> None:
        writer.int32(self.epoch)
        tagged: dict[int, bytes] = {}
        if self.metadata_hash != 0:
            tag = MessageWriter(flexible=True)
            tag.int64(self.metadata_hash)
            tagged[_METADATA_HASH_TAG] = tag.to_bytes()
        writer.tagged_fields(tagged)

    @classmethod
    def read(cls, reader: MessageReader, version: int) -> ConsumerGroupMetadataValue:
        epoch = reader.int32()
        metadata_hash = 0
        tagged = reader.tagged_fields()
        if _METADATA_HASH_TAG in tagged:
            tag = _read_tag(tagged[_METADATA_HASH_TAG], "metadata_hash")
            metadata_hash = tag.int64()
            tag.done()
        return cls(epoch=epoch, metadata_hash=metadata_hash)


@dataclass(frozen=True)
class ClassicProtocol:
    """A protocol a classic (JoinGroup) member supports, with its metadata bytes."""

    name: str
    metadata: bytes

    def write(self, writer: MessageWriter) -> None:
        writer.string(self.name)
        writer.byte_array(self.metadata)
        writer.tagged_fields()

    @classmethod
    def read(cls, reader: MessageReader) -> ClassicProtocol:
        name, metadata = reader.string("name"), reader.byte_array("metadata")
        reader.tagged_fields()
        return cls(name, metadata)


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """What a member that joined with the classic protocol brought along."""

    session_timeout_ms: int = 0
    supported_protocols: tuple[ClassicProtocol, ...] = ()

    def write(self, writer: MessageWriter) -> None:
        writer.int32(self.session_timeout_ms)
        writer.array(self.supported_protocols, lambda out, protocol: protocol.write(out))
        writer.tagged_fields()

    @classmethod
    def read(cls, reader: MessageReader) -> ClassicMemberMetadata:
        session_timeout_ms = reader.int32()
        protocols = reader.array("supported_protocols", ClassicProtocol.read)
        reader.tagged_fields()
        return cls(session_timeout_ms, tuple(protocols))


# Tagged field 0's default: Kafka writes the field unless it equals this (an empty
# instance), and writes an explicit null (presence byte 0) for ``None``, which is what
# its coordinator stores for a member of the consumer protocol.
_DEFAULT_CLASSIC_MEMBER_METADATA = ClassicMemberMetadata()


@dataclass(frozen=True)
class ConsumerGroupMemberMetadataValue(_VersionZero):
    """A member's subscription: topic names and/or a regular expression (RE2/J)."""

    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic_member_metadata: ClassicMemberMetadata | None = _DEFAULT_CLASSIC_MEMBER_METADATA

    def write(self, writer: MessageWriter, version: int) -> None:
        writer.nullable_string(self.instance_id)
        writer.nullable_string(self.rack_id)
        writer.string(self.client_id)
        writer.string(self.client_host)
        writer.array(self.subscribed_topic_names, MessageWriter.string)
        writer.nullable_string(self.subscribed_topic_regex)
        writer.int32(self.rebalance_timeout_ms)
        writer.nullable_string(self.server_assignor)
        tagged: dict[int, bytes] = {}
        if self.classic_member_metadata != _DEFAULT_CLASSIC_MEMBER_METADATA:
            tag = MessageWriter(flexible=True)
            if self.classic_member_metadata is None:
                tag.unsigned_varint(0)
            else:
                tag.unsigned_varint(1)
                self.classic_member_metadata.write(tag)
            tagged[_CLASSIC_MEMBER_METADATA_TAG] = tag.to_bytes()
        writer.tagged_fields(tagged)

    @classmethod
    def read(cls, reader: MessageReader, version: int) -> ConsumerGroupMemberMetadataValue:
        instance_id = reader.nullable_string()
        rack_id = reader.nullable_string()
        client_id = reader.string("client_id")
        client_host = reader.string("client_host")
        topic_names = reader.array("subscribed_topic_names", lambda src: src.string("topic"))
        topic_regex = reader.nullable_string()
        rebalance_timeout_ms = reader.int32()
        server_assignor = reader.nullable_string()
        classic: ClassicMemberMetadata | None = _DEFAULT_CLASSIC_MEMBER_METADATA
        tagged = reader.tagged_fields()
        if _CLASSIC_MEMBER_METADATA_TAG in tagged:
            tag = _read_tag(tagged[_CLASSIC_MEMBER_METADATA_TAG], "classic_member_metadata")
            classic = ClassicMemberMetadata.read(tag) if tag.unsigned_varint() else None
            tag.done()
        return cls(
            client_id=client_id,
            client_host=client_host,
            subscribed_topic_names=tuple(topic_names),
            subscribed_topic_regex=topic_regex,
            instance_id=instance_id,
            rack_id=rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms,
            server_assignor=server_assignor,
            classic_member_metadata=classic,
        )


@dataclass(frozen=True)
class TopicPartitions:
    """Partitions of one topic, named by its id."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]

    def write(self, writer: MessageWriter) -> None:
        writer.uuid(self.topic_id)
        writer.array(self.partitions, MessageWriter.int32)
        writer.tagged_fields()

    @classmethod
    def read(cls, reader: MessageReader) -> TopicPartitions:
        topic_id = reader.uuid()
        partitions = reader.array("partitions", MessageReader.int32)
        reader.tagged_fields()
        return cls(topic_id, tuple(partitions))


def _write_assignment(writer: MessageWriter, assignment: tuple[TopicPartitions, ...]) -> None:
    writer.array(assignment, lambda out, topic: topic.write(out))


def _read_assignment(reader: MessageReader, field: str) -> tuple[TopicPartitions, ...]:
    return tuple(reader.array(field, TopicPartitions.read))


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMetadataValue(_VersionZero):
    """The group epoch the target assignment was computed for."""

    assignment_epoch: int

    def write(self, writer: MessageWriter, version: int) -> None:
        writer.int32(self.assignment_epoch)
        writer.tagged_fields()

    @classmethod
    def read(
        cls, reader: MessageReader, version: int
    ) -> ConsumerGroupTargetAssignmentMetadataValue:
        assignment_epoch = reader.int32()
        reader.tagged_fields()
        return cls(assignment_epoch)


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMemberValue(_VersionZero):
    """The partitions the assignor means a member to own."""

    topic_partitions: tuple[TopicPartitions, ...] = ()

    def write(self, writer: MessageWriter, version: int) -> None:
        _write_assignment(writer, self.topic_partitions)
        writer.tagged_fields()

    @classmethod
    def read(cls, reader: MessageReader, version: int) -> ConsumerGroupTargetAssignmentMemberValue:
        topic_partitions = _read_assignment(reader, "topic_partitions")
        reader.tagged_fields()
        return cls(topic_partitions)


class MemberState(IntEnum):
    """A member's reconciliation state (the ``state`` byte), as Kafka numbers it."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True)
class ConsumerGroupCurrentMemberAssignmentValue(_VersionZero):
    """What a member owns at its epoch, and what it must give up before it gets more."""

    member_epoch: int
    previous_member_epoch: int
    state: int  # a MemberState; any int8 is carried as it is
    assigned_partitions: tuple[TopicPartitions, ...] = ()
    partitions_pending_revocation: tuple[TopicPartitions, ...] = ()

    def write(self, writer: MessageWriter, version: int) -> None:
        writer.int32(self.member_epoch)
        writer.int32(self.previous_member_epoch)
        writer.int8(self.state)
        _write_assignment(writer, self.assigned_partitions)
        _write_assignment(writer, self.partitions_pending_revocation)
        writer.tagged_fields()

    @classmethod
    def read(cls, reader: MessageReader, version: int) -> ConsumerGroupCurrentMemberAssignmentValue:
        member_epoch = reader.int32()
        previous_member_epoch = reader.int32()
        state = reader.int8()
        assigned = _read_assignment(reader, "assigned_partitions")
        pending = _read_assignment(reader, "partitions_pending_revocation")
        reader.tagged_fields()
        return cls(member_epoch, previous_member_epoch, state, assigned, pending)


@dataclass(frozen=True)
class ConsumerGroupRegularExpressionValue(_VersionZero):
    """The topics a subscribed regular expression matched, at a metadata version."""

    topics: tuple[str, ...]
    version: int
    timestamp_ms: int

    def write(self, writer: MessageWriter, version: int) -> None:
        writer.array(self.topics, MessageWriter.string)
        writer.int64(self.version)
        writer.int64(self.timestamp_ms)
        writer.tagged_fields()

    @classmethod
    def read(cls, reader: MessageReader, version: int) -> ConsumerGroupRegularExpressionValue:
        topics = reader.array("topics", lambda src: src.string("topic"))
        metadata_version, timestamp_ms = reader.int64(), reader.int64()
        reader.tagged_fields()
        return cls(tuple(topics), metadata_version, timestamp_ms)


@dataclass(frozen=True)
class PartitionMetadata:
    """The racks of one partition's replicas."""

    partition: int
    racks: tuple[str, ...] = ()

    def write(self, writer: MessageWriter) -> None:
        writer.int32(self.partition)
        writer.array(self.racks, MessageWriter.string)
        writer.tagged_fields()

    @classmethod
    def read(cls, reader: MessageReader) -> PartitionMetadata:
        partition = reader.int32()
        racks = reader.array("racks", lambda src: src.string("rack"))
        reader.tagged_fields()
        return cls(partition, tuple(racks))


@dataclass(frozen=True)
class TopicMetadata:
    """A subscribed topic as the group last saw it."""

    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_metadata: tuple[PartitionMetadata, ...] = ()

    def write(self, writer: MessageWriter) -> None:
        writer.uuid(self.topic_id)
        writer.string(self.topic_name)
        writer.int32(self.num_partitions)
        writer.array(self.partition_metadata, lambda out, partition: partition.write(out))
        writer.tagged_fields()

    @classmethod
    def read(cls, reader: MessageReader) -> TopicMetadata:
        topic_id = reader.uuid()
        topic_name = reader.string("topic_name")
        num_partitions = reader.int32()
        partitions = reader.array("partition_metadata", PartitionMetadata.read)
        reader.tagged_fields()
        return cls(topic_id, topic_name, num_partitions, tuple(partitions))


@dataclass(frozen=True)
class ConsumerGroupPartitionMetadataValue(_VersionZero):
    """The subscribed topics' metadata (read and deleted by 4.1, written by 4.0)."""

    topics: tuple[TopicMetadata, ...] = ()

    def write(self, writer: MessageWriter, version: int) -> None:
        writer.array(self.topics, lambda out, topic: topic.write(out))
        writer.tagged_fields()

    @classmethod
    def read(cls, reader: MessageReader, version: int) -> ConsumerGroupPartitionMetadataValue:
        topics = reader.array("topics", TopicMetadata.read)
        reader.tagged_fields()
        return cls(tuple(topics))
