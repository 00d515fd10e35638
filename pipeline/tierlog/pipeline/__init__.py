"""Spark reads of Kafka-format log dirs and tiers (``format("tierlog")``) and the jobs
built on them. ``register(spark)`` is imported lazily, so the Spark-free core
(listing, planning, decoding) imports without PySpark's JVM machinery."""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["register"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("tierlog")`` and ``readStream.format("tierlog")`` work."""
    from tierlog.pipeline.datasource import register as register_source

    register_source(spark)
