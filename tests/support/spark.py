"""The one SparkSession of a test run: ``local[2]`` with ``format("tierlog")`` and Spark's
own Kafka source (``spark-sql-kafka-0-10``, installed by ``make tools``) on its classpath.

Registered for every test folder by ``tests/conftest.py`` (``pytest_plugins``). PySpark
keeps the JVM of its first session for the whole process, and that JVM's classpath is
fixed when it starts: a later session with other ``spark.jars`` would not see them. So
the pipeline tests and the Kafka listener's Spark test share this one session, and it
carries both sources from the start. tierlog's jars come first, as
``tierlog.pipeline.configure`` puts them in ``spark.jars``, which Spark places before the
jars it resolves from ``spark.jars.packages``: so the Kafka source runs on tierlog's
kafka-clients 4.1.1 rather than the 3.9.2 it was built with, as it does for a user.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.tools.bootstrap import SPARK_KAFKA

if TYPE_CHECKING:  # PySpark is imported by the first test that asks for a session
    from pyspark.sql import SparkSession

__all__ = ["spark"]


def _kafka_source_jars() -> list[str]:
    assert SPARK_KAFKA.is_current(), f"{SPARK_KAFKA.name} is not installed: run `make tools`"
    return sorted(str(jar) for jar in (SPARK_KAFKA.home / "libs").glob("*.jar"))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] SparkSession for every Spark test: JVM start-up is slow."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

    from pyspark.sql import SparkSession

    from tierlog.pipeline import register
    from tierlog.pipeline.jars import classpath

    jars = [*map(str, classpath()), *_kafka_source_jars()]
    session = (
        SparkSession.builder.master("local[2]")
        .appName("tierlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        # Python workers import PySpark, pyarrow and pandas: on a loaded machine that can
        # outlast the 15 s default for a worker to connect back.
        .config("spark.python.authenticate.socketTimeout", "180s")
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=error")
        .config("spark.jars", ",".join(jars))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
