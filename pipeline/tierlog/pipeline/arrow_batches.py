"""Decoding a split into Arrow record batches with the Kafka source's schema.

Records are decoded by the storage engine's columnar decoder (``records.columnar``:
a native walk of each batch into Arrow's buffer layouts, every magic and codec), so
this module only wraps its buffers into arrays, without copying them; the topic and
partition columns are repeated scalars, and the timestamps scaled to Spark's
microseconds, in one vectorised call each.

Reads are read_committed: control batches (transaction markers) are never returned,
nor the transactional batches of the split's aborted transactions (found by the planner
in the segments' transaction indexes, ``transactions.py``); the planner also stops
every query at the last stable offset, so no undecided record is ever decoded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tierlog.pipeline.planner import InputSplit
from tierlog.pipeline.schema import HEADER_TYPE, arrow_schema
from tierlog.pipeline.segments import SegmentReader
from tierlog.pipeline.transactions import AbortedRanges
from tierlog.storage.records.columnar import BinaryBuffers, ColumnBuffers, RecordColumns

__all__ = ["SplitDecoder", "decode_split"]

# An Arrow binary column addresses its data with int32 offsets: flush well before.
MAX_PENDING_DATA_BYTES = 1 << 30


def _binary_array(buffers: BinaryBuffers, rows: int, data_type: pa.DataType) -> pa.Array[Any]:
    validity = None if buffers.validity is None else pa.py_buffer(buffers.validity)
    return pa.Array.from_buffers(
        data_type,
        rows,
        [validity, pa.py_buffer(buffers.offsets), pa.py_buffer(buffers.data)],
        null_count=buffers.null_count,
    )


def _headers_array(columns: ColumnBuffers) -> pa.Array[Any]:
    headers = columns.headers
    assert headers is not None
    entries = len(headers.keys.offsets) // 4 - 1
    entry = pa.StructArray.from_arrays(
        [
            _binary_array(headers.keys, entries, pa.string()),
            _binary_array(headers.values, entries, pa.binary()),
        ],
        fields=list(HEADER_TYPE.value_type),
    )
    validity = None if headers.validity is None else pa.py_buffer(headers.validity)
    return pa.Array.from_buffers(
        HEADER_TYPE,
        columns.rows,
        [validity, pa.py_buffer(headers.lists)],
        null_count=headers.null_count,
        children=[entry],
    )


class SplitDecoder:
    """Accumulates one split's records into columns and cuts them into batches."""

    def __init__(self, split: InputSplit, *, include_headers: bool):
        self.split = split
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers=include_headers)
        self.columns = RecordColumns(include_headers=include_headers)

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def full(self) -> bool:
        return self.columns.data_bytes >= MAX_PENDING_DATA_BYTES

    def flush(self) -> pa.RecordBatch:
        columns = self.columns.take()
        rows = columns.rows
        arrays: list[pa.Array[Any]] = [
            _binary_array(columns.keys, rows, pa.binary()),
            _binary_array(columns.values, rows, pa.binary()),
            pa.repeat(pa.scalar(self.split.tp.topic, pa.string()), rows),
            pa.repeat(pa.scalar(self.split.tp.partition, pa.int32()), rows),
            pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(columns.offsets)]),
            pc.multiply(
                pa.Array.from_buffers(
                    pa.int64(), rows, [None, pa.py_buffer(columns.timestamps_ms)]
                ),
                1000,
            ).cast(pa.timestamp("us", tz="UTC")),
            pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(columns.timestamp_types)]),
        ]
        if self.include_headers:
            arrays.append(_headers_array(columns))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


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
        decoder.columns.add(batch.buffer, header, split.start_offset, split.end_offset)
        if len(decoder) >= batch_rows or decoder.full:
            yield decoder.flush()
    if len(decoder):
        yield decoder.flush()
