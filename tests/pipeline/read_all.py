"""Reading a query without Spark: plan, then read every split in order with the storage
engine's row decoder, by the JVM reader's rules (control batches and aborted
transactions' batches skipped, offsets outside the split's dropped). The JVM-free twin of
``spark.read.format("tierlog")`` for the planning tests; tests/pipeline/jvm holds the JVM
reader equal to it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from tierlog.pipeline.bounds import RowBounds
from tierlog.pipeline.options import parse_options
from tierlog.pipeline.planner import InputSplit
from tierlog.pipeline.readers import opened
from tierlog.pipeline.source import plan_batch
from tierlog.pipeline.transactions import AbortedRanges
from tierlog.storage.config import TimestampType
from tierlog.storage.records import BatchHeader, Record, decode_records

__all__ = ["arrow_schema", "read_splits", "read_table", "split_records", "timestamp_type_id"]

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def arrow_schema(*, include_headers: bool) -> pa.Schema:
    """The Kafka source's schema (tierlog.spark.KafkaSchema) as Arrow."""
    fields: list[pa.Field[Any]] = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


def timestamp_type_id(header: BatchHeader) -> int:
    """Kafka's id: -1 for v0 messages (no timestamps), 1 LogAppendTime, 0 CreateTime."""
    if header.magic == 0:
        return -1
    return 1 if header.timestamp_type is TimestampType.LOG_APPEND_TIME else 0


def split_records(split: InputSplit) -> Iterator[tuple[BatchHeader, Record]]:
    """The records ``split`` selects, each with the header of its batch."""
    aborted = AbortedRanges(split.aborted)
    with opened(split.segment) as reader:
        for batch in reader.batches(split.start_position, split.end_position):
            header = batch.header
            if header.base_offset >= split.end_offset and header.record_count >= 0:
                return
            if header.is_control or header.last_offset < split.start_offset:
                continue
            if aborted.holds(header):
                continue
            for record in decode_records(batch.buffer, header):
                if split.start_offset <= record.offset < split.end_offset:
                    yield header, record


def read_splits(splits: list[InputSplit], *, include_headers: bool = False) -> pa.Table:
    columns: dict[str, list[Any]] = {name: [] for name in arrow_schema(include_headers=True).names}
    for split in splits:
        for header, record in split_records(split):
            columns["key"].append(record.key)
            columns["value"].append(record.value)
            columns["topic"].append(split.tp.topic)
            columns["partition"].append(split.tp.partition)
            columns["offset"].append(record.offset)
            columns["timestamp"].append(record.timestamp * 1000)
            columns["timestampType"].append(timestamp_type_id(header))
            headers = [{"key": key, "value": value} for key, value in record.headers]
            columns["headers"].append(headers or None)
    schema = arrow_schema(include_headers=include_headers)
    arrays = [
        pa.array(columns[field.name], pa.int64()).cast(field.type)
        if field.name == "timestamp"
        else pa.array(columns[field.name], field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def read_table(options: Mapping[str, str], bounds: RowBounds | None = None) -> pa.Table:
    parsed = parse_options(options)
    splits = plan_batch(parsed, bounds or RowBounds())
    return read_splits(splits, include_headers=parsed.include_headers)
