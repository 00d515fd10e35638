"""Reading a query the way the data source does, without Spark: plan, then decode every
split in order. The JVM-free twin of ``spark.read.format("tierlog")`` for tests."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from tierlog.pipeline.arrow_batches import decode_split
from tierlog.pipeline.bounds import RowBounds
from tierlog.pipeline.options import parse_options
from tierlog.pipeline.planner import InputSplit
from tierlog.pipeline.schema import arrow_schema
from tierlog.pipeline.segments import opened
from tierlog.pipeline.source import plan_batch

__all__ = ["read_splits", "read_table"]


def read_splits(splits: list[InputSplit], *, include_headers: bool = False) -> pa.Table:
    batches: list[pa.RecordBatch] = []
    for split in splits:
        with opened(split.segment) as reader:
            batches.extend(decode_split(split, reader, include_headers=include_headers))
    return pa.Table.from_batches(batches, schema=arrow_schema(include_headers=include_headers))


def read_table(options: Mapping[str, str], bounds: RowBounds | None = None) -> pa.Table:
    parsed = parse_options(options)
    splits = plan_batch(parsed, bounds or RowBounds())
    return read_splits(splits, include_headers=parsed.include_headers)
