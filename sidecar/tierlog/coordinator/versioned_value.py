"""A coordinator record's value: an int16 schema version, then the fields of that version.

Both coordinators' topics (``__consumer_offsets``, ``__transaction_state``) store values
this way, each value type knowing its versions, which of them are flexible, the version
Kafka 4.1 writes, and how to write and read its fields at a version. A version outside
the type's is ``UnknownRecordVersionError`` both ways (Kafka's
``UnknownRecordVersionException``); bytes too short to hold a version are corrupt.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, Self, TypeVar

from tierlog.coordinator.errors import UnknownRecordVersionError
from tierlog.coordinator.protocol_types import MessageReader, MessageWriter
from tierlog.storage.errors import CorruptRecordError

__all__ = ["VERSION_BYTES", "VersionedValue", "decode_versioned", "encode_versioned", "version_of"]

VERSION_BYTES = 2


class VersionedValue(Protocol):
    """A value type of a coordinator record, as the record modules define them."""

    VERSIONS: ClassVar[range]
    FLEXIBLE_VERSIONS: ClassVar[range]

    def default_version(self) -> int: ...

    def write(self, writer: MessageWriter, version: int) -> None: ...

    @classmethod
    def read(cls, reader: MessageReader, version: int) -> Self: ...


V = TypeVar("V", bound=VersionedValue)


def version_of(data: bytes, what: str) -> int:
    """The int16 in front of a key or value."""
    if len(data) < VERSION_BYTES:
        raise CorruptRecordError(f"{what} of {len(data)} bytes has no version")
    return int.from_bytes(data[:VERSION_BYTES], "big", signed=True)


def encode_versioned(value: VersionedValue, version: int | None = None) -> bytes:
    """The value's bytes at ``version`` (by default the one Kafka 4.1 writes)."""
    version = value.default_version() if version is None else version
    if version not in value.VERSIONS:
        raise UnknownRecordVersionError(
            f"{type(value).__name__} has versions {_span(value.VERSIONS)}, not {version}"
        )
    writer = MessageWriter(flexible=version in value.FLEXIBLE_VERSIONS)
    writer.int16(version)
    value.write(writer, version)
    return writer.to_bytes()


def decode_versioned(value_type: type[V], data: bytes) -> tuple[V, int]:
    """A value of ``value_type`` from its bytes, and the version it was written at."""
    version = version_of(data, f"a {value_type.__name__}")
    if version not in value_type.VERSIONS:
        raise UnknownRecordVersionError(
            f"{value_type.__name__} version {version} (known: {_span(value_type.VERSIONS)})"
        )
    flexible = version in value_type.FLEXIBLE_VERSIONS
    reader = MessageReader(data[VERSION_BYTES:], flexible=flexible, what=value_type.__name__)
    value = value_type.read(reader, version)
    reader.done()
    return value, version


def _span(versions: range) -> str:
    return f"{versions.start}-{versions.stop - 1}"
