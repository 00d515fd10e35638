"""The Spark adapter: format ``tierlog``, a thin layer over the planning and decoding.

``register(spark)`` once, then ``spark.read.format("tierlog")`` (batch) or
``spark.readStream.format("tierlog")`` (micro-batches). Everything that decides what
is read lives in Spark-free modules (``source``, ``planner``, ``arrow_batches``); this
module only converts: options in, splits out as input partitions, Arrow batches back,
pushed filters (Spark 4.1+) into ``RowBounds``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from tierlog.pipeline.arrow_batches import decode_split
from tierlog.pipeline.bounds import RowBounds
from tierlog.pipeline.options import SourceOptions, parse_options
from tierlog.pipeline.planner import InputSplit
from tierlog.pipeline.pushdown import bounds_from_filters
from tierlog.pipeline.schema import spark_ddl
from tierlog.pipeline.segments import opened
from tierlog.pipeline.source import discover, latest_offsets, plan_batch, plan_stream_range
from tierlog.pipeline.stream_offsets import initial_offsets, offsets_from_json, offsets_to_json
from tierlog.pipeline.workers import freeze_long_lived_objects, worker_python

__all__ = ["FORMAT", "TierlogDataSource", "register"]

FORMAT = "tierlog"


class SplitPartition(InputPartition):
    """One split as Spark's input partition."""

    def __init__(self, split: InputSplit):
        super().__init__(split)
        self.split = split


def _read(split: InputSplit, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    freeze_long_lived_objects()  # Spark's daemon collects after every task (workers.py)
    with opened(split.segment) as reader:
        yield from decode_split(
            split,
            reader,
            include_headers=options.include_headers,
            batch_rows=options.max_records_per_batch,
        )


class TierlogBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options
        self.bounds = RowBounds()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802
        self.bounds, kept = bounds_from_filters(filters)
        return kept

    def partitions(self) -> Sequence[InputPartition]:
        return [SplitPartition(split) for split in plan_batch(self.options, self.bounds)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitPartition)
        return _read(partition.split, self.options)


class TierlogStreamReader(DataSourceStreamReader):
    """Offsets are ``{"topic": {"partition": next offset}}``, as the Kafka source's."""

    def __init__(self, options: SourceOptions):
        self.options = options

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802
        histories = discover(self.options.paths, self.options.subscription, s3=self.options.s3)
        return offsets_to_json(initial_offsets(histories, self.options))

    def latestOffset(  # noqa: N802
        self, start: dict[str, Any] | None = None, limit: object = None
    ) -> dict[str, Any]:
        histories = discover(self.options.paths, self.options.subscription, s3=self.options.s3)
        return offsets_to_json(latest_offsets(histories))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        splits = plan_stream_range(self.options, offsets_from_json(start), offsets_from_json(end))
        return [SplitPartition(split) for split in splits]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitPartition)
        return _read(partition.split, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge: the log is read, never consumed."""


class TierlogDataSource(DataSource):
    """``format("tierlog")``: Kafka-format log dirs and tiers as the Kafka source's rows."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return spark_ddl(include_headers=_include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return TierlogBatchReader(parse_options(dict(self.options)))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return TierlogStreamReader(parse_options(dict(self.options), streaming=True))


def _include_headers(options: Mapping[str, str]) -> bool:
    return str(options.get("includeHeaders", "false")).lower() == "true"


FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: SparkSession) -> None:
    """Make ``format("tierlog")`` available in ``spark``.

    Also turns on Python data source filter pushdown (Spark 4.1+, off by default): a
    reader that implements ``pushFilters`` is refused while it is off. In local mode,
    points the Python workers at this interpreter unless ``PYSPARK_PYTHON`` names one
    (``workers.worker_python``), which must then import tierlog.
    """
    context = spark.sparkContext
    context.pythonExec = worker_python(context.master or "", context.pythonExec, os.environ)
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    spark.dataSource.register(TierlogDataSource)
