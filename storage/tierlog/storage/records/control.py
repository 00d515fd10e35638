"""Control records, and the end-transaction markers built from them.

A control batch (attribute bit 5) holds records that are not user data.  Every
control record's key is ``version:int16 (0) | type:int16``; an end-transaction marker
(type ABORT=0 or COMMIT=1) has the value ``version:int16 (0) | coordinatorEpoch:int32``.
A marker batch is transactional, carries the producer's id and epoch, has no base
sequence, and holds exactly one such record.  Readers accept newer key and value
versions by reading the fields they know, as Kafka does; a negative version or a
short key or value is an invalid record.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from tierlog.storage.errors import InvalidRecordError
from tierlog.storage.records.batch import (
    NO_PARTITION_LEADER_EPOCH,
    NO_SEQUENCE,
    BatchHeader,
    build_batch,
    decode_records,
)
from tierlog.storage.records.buffers import ReadableBuffer
from tierlog.storage.records.record import Record, SimpleRecord

__all__ = [
    "ControlRecordType",
    "EndTransactionMarker",
    "build_end_txn_marker_batch",
    "control_record_key",
    "parse_control_type",
    "parse_end_txn_marker",
    "read_end_txn_marker",
]

_KEY = struct.Struct(">hh")  # version, type
_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_KEY_VERSION = 0
_MARKER_VERSION = 0


class ControlRecordType(IntEnum):
    """The ``type`` in a control record's key."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2  # KRaft metadata logs
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker and the coordinator epoch that wrote it."""

    control_type: ControlRecordType
    coordinator_epoch: int

    def __post_init__(self) -> None:
        if self.control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise ValueError(f"{self.control_type!r} is not an end-transaction marker type")

    @property
    def committed(self) -> bool:
        return self.control_type is ControlRecordType.COMMIT


def control_record_key(control_type: ControlRecordType) -> bytes:
    """The 4-byte key of a control record of ``control_type``."""
    return _KEY.pack(_KEY_VERSION, control_type)


def parse_control_type(key: bytes | None) -> ControlRecordType | int:
    """The type in a control record key; an unknown type comes back as its raw id."""
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError(f"control record key needs {_KEY.size} bytes")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"invalid control record key version {version}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return int(type_id)


def parse_end_txn_marker(record: Record) -> EndTransactionMarker:
    """The marker in a control record (from a control batch)."""
    control_type = parse_control_type(record.key)
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise InvalidRecordError(f"control type {control_type} is not an end-transaction marker")
    value = record.value
    if value is None or len(value) < _MARKER_VALUE.size:
        raise InvalidRecordError(f"end-transaction marker value needs {_MARKER_VALUE.size} bytes")
    version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    if version < 0:
        raise InvalidRecordError(f"invalid end-transaction marker version {version}")
    return EndTransactionMarker(ControlRecordType(control_type), coordinator_epoch)


def build_end_txn_marker_batch(
    marker: EndTransactionMarker,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A control batch of one end-transaction marker, as a transaction coordinator writes it."""
    if producer_id < 0:
        raise ValueError("an end-transaction marker needs a producer id")
    record = SimpleRecord(
        key=control_record_key(marker.control_type),
        value=_MARKER_VALUE.pack(_MARKER_VERSION, marker.coordinator_epoch),
        timestamp=timestamp_ms,
    )
    return build_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
    )


def read_end_txn_marker(buf: ReadableBuffer, header: BatchHeader) -> EndTransactionMarker:
    """The marker of the control batch ``header`` describes."""
    if not header.is_control:
        raise InvalidRecordError(f"batch at {header.position} is not a control batch")
    records = decode_records(buf, header)
    if len(records) != 1:
        raise InvalidRecordError(f"a marker batch holds one record, not {len(records)}")
    return parse_end_txn_marker(records[0])
