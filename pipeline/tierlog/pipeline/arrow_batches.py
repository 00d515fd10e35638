"""Decoding a split into Arrow record batches with the Kafka source's schema.

Records are decoded by the storage engine's own decoder (every magic, every codec);
this module only turns them into columns. Per-batch work is done once per batch
(timestamp type, control and range checks) and the columns are built from flat
arrays: offsets and timestamps in ``array('q')``, the topic and partition columns
straight from buffers, keys and values from lists of bytes in one call each.

Reads are read_committed: control batches (transaction markers) are never returned,
nor the transactional batches of the split's aborted transactions (found by the planner
in the segments' transaction indexes, ``transactions.py``); the planner also stops
every query at the last stable offset, so no undecided record is ever decoded.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tierlog.pipeline.planner import InputSplit
from tierlog.pipeline.schema import HEADER_TYPE, arrow_schema
from tierlog.pipeline.segments import SegmentReader
from tierlog.pipeline.transactions import AbortedRanges
from tierlog.storage.config import TimestampType
from tierlog.storage.records import BatchHeader, Record, decode_records

__all__ = ["SplitDecoder", "decode_split"]

NO_TIMESTAMP_TYPE = -1  # Kafka's id for v0 messages, which carry no timestamp


def _timestamp_type_id(header: BatchHeader) -> int:
    if header.magic == 0:
        return NO_TIMESTAMP_TYPE
    return 1 if header.timestamp_type is TimestampType.LOG_APPEND_TIME else 0


class SplitDecoder:
    """Accumulates one split's records into columns and cuts them into batches."""

    def __init__(self, split: InputSplit, *, include_headers: bool):
        self.split = split
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers=include_headers)
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets = array("q")
        self.timestamps_ms = array("q")
        self.timestamp_types = array("i")
        self.headers: list[list[dict[str, object]] | None] = []

    def add(self, header: BatchHeader, records: list[Record]) -> None:
        low, high = self.split.start_offset, self.split.end_offset
        if records[0].offset < low or records[-1].offset >= high:
            records = [record for record in records if low <= record.offset < high]
        self.keys += [record.key for record in records]
        self.values += [record.value for record in records]
        self.offsets.extend(record.offset for record in records)
        self.timestamps_ms.extend(record.timestamp for record in records)
        self.timestamp_types.extend(array("i", [_timestamp_type_id(header)]) * len(records))
        if self.include_headers:
            self.headers += [
                [{"key": key, "value": value} for key, value in record.headers]
                if record.headers
                else None
                for record in records
            ]

    def __len__(self) -> int:
        return len(self.offsets)

    def flush(self) -> pa.RecordBatch:
        rows = len(self.offsets)
        topic = self.split.tp.topic.encode()  # never empty: topic names are validated
        columns: list[pa.Array[Any]] = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.StringArray.from_buffers(
                rows,
                pa.py_buffer(array("i", range(0, (rows + 1) * len(topic), len(topic)))),
                pa.py_buffer(topic * rows),
            ),
            pa.Array.from_buffers(
                pa.int32(), rows, [None, pa.py_buffer(array("i", [self.split.tp.partition]) * rows)]
            ),
            pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(self.offsets)]),
            pc.multiply(
                pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(self.timestamps_ms)]),
                1000,
            ).cast(pa.timestamp("us", tz="UTC")),
            pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(self.timestamp_types)]),
        ]
        if self.include_headers:
            columns.append(pa.array(self.headers, HEADER_TYPE))
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def decode_split(
    split: InputSplit,
    reader: SegmentReader,
    *,
    include_headers: bool = False,
    batch_rows: int = 65536,
) -> Iterator[pa.RecordBatch]:
    """The selected records of ``split`` as Arrow batches of at most ~``batch_rows`` rows."""
    decoder = SplitDecoder(split, include_headers=include_headers)
    aborted = AbortedRanges(split.aborted)
    for batch in reader.batches(split.start_position, split.end_position):
        header = batch.header
        if header.base_offset >= split.end_offset and header.record_count >= 0:
            break
        if header.is_control or header.last_offset < split.start_offset:
            continue
        if aborted and aborted.holds(header):
            continue
        records = decode_records(batch.buffer, header)
        if records:
            decoder.add(header, records)
        if len(decoder) >= batch_rows:
            yield decoder.flush()
    if len(decoder):
        yield decoder.flush()
