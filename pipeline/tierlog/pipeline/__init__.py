"""Spark reads of Kafka-format log dirs and tiers (``format("tierlog")``) and the jobs
built on them.

The data source is a JVM DataSource V2 reader (``pipeline/jvm``: Kafka's own record
classes into Spark's column vectors) whose planning stays in Python (``source``), called
back from the driver's JVM. Two steps make it available::

    spark = tierlog.pipeline.configure(SparkSession.builder).getOrCreate()
    tierlog.pipeline.register(spark)

``configure`` puts the jars on the session's classpath (``spark.jars``), ``register``
installs the planner. Both import PySpark lazily, so the Spark-free core (listing,
planning) imports without its JVM machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["configure", "register"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def configure(builder: SparkSession.Builder) -> SparkSession.Builder:
    """``builder`` with tierlog's JVM source on its classpath: its jars are added to the
    builder's ``spark.jars`` (after any set before), which Spark ships to the executors.

    Builds the jars first when they are missing or stale (``tierlog.pipeline.jars``).
    """
    from tierlog.pipeline.jars import classpath

    given = str(builder._options.get("spark.jars", ""))
    jars = [jar for jar in given.split(",") if jar] + [str(jar) for jar in classpath()]
    return builder.config("spark.jars", ",".join(jars))


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("tierlog")`` and ``readStream.format("tierlog")`` work."""
    from tierlog.pipeline.registration import register as register_source

    register_source(spark)
