"""A classic group's state (the JoinGroup/SyncGroup protocol) in ``__consumer_offsets``:
key (group), value (protocol type, generation, chosen protocol, leader, members with
their opaque subscription and assignment bytes).

Value versions: 0; 1 adds each member's rebalance timeout; 2 the time of the group's
last state change; 3 each member's ``group.instance.id`` (static membership); 4 is
flexible. Kafka 4.1 writes version 3. A field a version lacks is left out (and reads
back as its default), as Kafka's writer leaves it out. A deleted group is its key with a null value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tierlog.coordinator.protocol_types import MessageReader, MessageWriter
from tierlog.coordinator.record_type import CoordinatorRecordType

__all__ = ["GroupMetadataKey", "GroupMetadataValue", "MemberMetadata"]

_NO_TIMEOUT = -1
_NO_TIMESTAMP = -1


@dataclass(frozen=True)
class GroupMetadataKey:
    """A classic group, by name."""

    RECORD_TYPE: ClassVar[CoordinatorRecordType] = CoordinatorRecordType.GROUP_METADATA

    group: str

    def write(self, writer: MessageWriter) -> None:
        writer.string(self.group)

    @classmethod
    def read(cls, reader: MessageReader) -> GroupMetadataKey:
        return cls(reader.string("group"))


@dataclass(frozen=True)
class MemberMetadata:
    """One member of a classic group, as its last JoinGroup and SyncGroup left it."""

    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    subscription: bytes = b""
    assignment: bytes = b""
    rebalance_timeout_ms: int = _NO_TIMEOUT  # versions 1+
    group_instance_id: str | None = None  # versions 3+

    def write(self, writer: MessageWriter, version: int) -> None:
        writer.string(self.member_id)
        if version >= 3:
            writer.nullable_string(self.group_instance_id)
        writer.string(self.client_id)
        writer.string(self.client_host)
        if version >= 1:
            writer.int32(self.rebalance_timeout_ms)
        writer.int32(self.session_timeout_ms)
        writer.byte_array(self.subscription)
        writer.byte_array(self.assignment)
        writer.tagged_fields()

    @classmethod
    def read(cls, reader: MessageReader, version: int) -> MemberMetadata:
        member_id = reader.string("member_id")
        group_instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string("client_id")
        client_host = reader.string("client_host")
        rebalance_timeout_ms = reader.int32() if version >= 1 else _NO_TIMEOUT
        session_timeout_ms = reader.int32()
        subscription = reader.byte_array("subscription")
        assignment = reader.byte_array("assignment")
        reader.tagged_fields()  # none known
        return cls(
            member_id=member_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            subscription=subscription,
            assignment=assignment,
            rebalance_timeout_ms=rebalance_timeout_ms,
            group_instance_id=group_instance_id,
        )


@dataclass(frozen=True)
class GroupMetadataValue:
    """A classic group's generation: ``protocol`` and ``leader`` are None while empty."""

    VERSIONS: ClassVar[range] = range(0, 5)
    FLEXIBLE_VERSIONS: ClassVar[range] = range(4, 5)

    protocol_type: str
    generation: int
    protocol: str | None = None
    leader: str | None = None
    members: tuple[MemberMetadata, ...] = ()
    current_state_timestamp_ms: int = _NO_TIMESTAMP  # versions 2+

    def default_version(self) -> int:
        return 3

    def write(self, writer: MessageWriter, version: int) -> None:
        writer.string(self.protocol_type)
        writer.int32(self.generation)
        writer.nullable_string(self.protocol)
        writer.nullable_string(self.leader)
        if version >= 2:
            writer.int64(self.current_state_timestamp_ms)
        writer.array(self.members, lambda out, member: member.write(out, version))
        writer.tagged_fields()

    @classmethod
    def read(cls, reader: MessageReader, version: int) -> GroupMetadataValue:
        protocol_type = reader.string("protocol_type")
        generation = reader.int32()
        protocol = reader.nullable_string()
        leader = reader.nullable_string()
        current_state_timestamp_ms = reader.int64() if version >= 2 else _NO_TIMESTAMP
        members = reader.array("members", lambda src: MemberMetadata.read(src, version))
        reader.tagged_fields()  # none known
        return cls(
            protocol_type=protocol_type,
            generation=generation,
            protocol=protocol,
            leader=leader,
            members=tuple(members),
            current_state_timestamp_ms=current_state_timestamp_ms,
        )
