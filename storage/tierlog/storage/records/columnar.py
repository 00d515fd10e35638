"""Record batches decoded into columns in Arrow's buffer layouts, no object per record.

The bulk readers (the Spark pipeline) want columns, not records: offsets and
timestamps as int64 arrays, keys and values as binary columns (int32 offsets into one
data buffer, a validity bitmap for nulls), headers as a list of key/value entries.
The native walker (``tierlog._columnar``, ``storage/columnar/src/columnar.c``) reads a
v2 batch's records section straight into such buffers, ~100x faster than one
``Record`` per record; decompression stays with the storage engine's codecs
(``records_section``), whose C libraries are not the cost.

Its rules are the row decoder's (``rows.decode_v2_rows``): every read is bounded, and a
batch the row decoder rejects raises the same ``CorruptRecordError`` and adds nothing.
v0/v1 message sets (old, and rare in a log written since Kafka 0.11) are decoded by
the row decoder and appended as rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from tierlog._columnar import Columns
from tierlog.storage.config import TimestampType
from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records.batch import (
    RECORDS_OFFSET,
    BatchHeader,
    decode_record_rows,
    log_append_time_of,
    v2_records,
)
from tierlog.storage.records.buffers import ReadableBuffer

__all__ = [
    "NO_TIMESTAMP_TYPE",
    "BinaryBuffers",
    "ColumnBuffers",
    "HeaderBuffers",
    "RecordColumns",
    "timestamp_type_id",
]

NO_TIMESTAMP_TYPE = -1  # Kafka's id for v0 messages, which carry no timestamp
_LOWEST, _HIGHEST = -(2**63), 2**63 - 1


def timestamp_type_id(header: BatchHeader) -> int:
    """Kafka's timestamp type id of the entry's records: 0 CreateTime, 1 LogAppendTime,
    -1 for v0 messages."""
    if header.magic == 0:
        return NO_TIMESTAMP_TYPE
    return 1 if header.timestamp_type is TimestampType.LOG_APPEND_TIME else 0


@dataclass(frozen=True)
class BinaryBuffers:
    """A binary (or UTF-8) column: ``len + 1`` int32 ``offsets`` into ``data``, and the
    validity bitmap (bit set: not null), None when no slot is null."""

    offsets: bytearray
    data: bytearray
    validity: bytearray | None
    null_count: int


@dataclass(frozen=True)
class HeaderBuffers:
    """Each row's headers: int32 ``lists`` offsets into the entries (``keys`` and
    ``values``), null (``validity``) for a record without headers."""

    lists: bytearray
    validity: bytearray | None
    null_count: int
    keys: BinaryBuffers
    values: BinaryBuffers


@dataclass(frozen=True)
class ColumnBuffers:
    """``rows`` records as columns: int64 ``offsets`` and ``timestamps_ms``, int32
    ``timestamp_types``, ``keys``, ``values``, and ``headers`` when asked for."""

    rows: int
    offsets: bytearray
    timestamps_ms: bytearray
    timestamp_types: bytearray
    keys: BinaryBuffers
    values: BinaryBuffers
    headers: HeaderBuffers | None


class RecordColumns:
    """Columns filled entry by entry (``add``) and taken in chunks (``take``): the
    buffers are handed over, never copied (bytearrays, which Arrow wraps as they are)."""

    def __init__(self, *, include_headers: bool) -> None:
        self._columns = Columns(include_headers=include_headers)

    def __len__(self) -> int:
        return len(self._columns)

    @property
    def data_bytes(self) -> int:
        """Bytes held by the binary columns (an Arrow binary column holds < 2 GiB)."""
        return self._columns.data_bytes

    def add(
        self, buf: ReadableBuffer, header: BatchHeader, low: int = _LOWEST, high: int = _HIGHEST
    ) -> int:
        """Adds the records of the entry ``header`` describes whose offsets are in
        ``[low, high)``; returns how many. Every record is checked, kept or not."""
        timestamp_type = timestamp_type_id(header)
        if header.magic != 2:
            rows = [row for row in decode_record_rows(buf, header) if low <= row[0] < high]
            return self._columns.add_rows(rows, timestamp_type)
        if header.end_position > len(buf):
            raise CorruptRecordError(f"entry at {header.position} is truncated")
        data: ReadableBuffer
        if header.is_compressed or header.record_count < 0:
            data, start, end, log_append_time = v2_records(buf, header)
        else:  # walked in place, not copied: a walk that reads past the section fails
            data, start, end = buf, header.position + RECORDS_OFFSET, header.end_position
            log_append_time = log_append_time_of(header)  # there as on a copy of it
        return self._columns.add_v2(
            data,
            start,
            end,
            header.record_count,
            header.base_offset,
            header.base_timestamp,
            log_append_time,
            timestamp_type,
            low,
            high,
        )

    def take(self) -> ColumnBuffers:
        """The columns added since the last ``take``."""
        rows, offsets, timestamps, types, keys, values, headers = self._columns.take()
        return ColumnBuffers(
            rows,
            offsets,
            timestamps,
            types,
            BinaryBuffers(*keys),
            BinaryBuffers(*values),
            None
            if headers is None
            else HeaderBuffers(
                headers[0],
                headers[1],
                headers[2],
                BinaryBuffers(*headers[3]),
                BinaryBuffers(*headers[4]),
            ),
        )
