"""``register(spark)``: the Python planner installed into the session's JVM, or a typed
error saying what to set when the JVM side is not on the session's classpath."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.pipeline.conftest import write_log
from tierlog.pipeline import register
from tierlog.storage.topic_partition import TopicPartition

pytestmark = pytest.mark.slow

TOPIC = "orders"

WITHOUT_JARS = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    from tierlog.pipeline import register
    from tierlog.pipeline.errors import JvmSourceError

    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    spark = spark.getOrCreate()
    try:
        register(spark)
    except JvmSourceError as error:
        print(error)
        sys.exit(3)
    finally:
        spark.stop()
    """
)


def test_a_session_without_the_jars_is_refused_saying_what_to_set(tmp_path: Path) -> None:
    script = tmp_path / "without_jars.py"
    script.write_text(WITHOUT_JARS)

    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
    )

    assert done.returncode == 3, done.stderr
    assert "tierlog.pipeline.configure(SparkSession.builder)" in done.stdout
    assert "spark.jars" in done.stdout


def test_a_query_before_register_says_to_register(spark: SparkSession, tmp_path: Path) -> None:
    write_log(tmp_path, TopicPartition(TOPIC, 0), 10)
    jvm = spark._jvm
    assert jvm is not None
    jvm.tierlog.spark.Planners.install(None)
    try:
        frame = spark.read.format("tierlog").option("subscribe", TOPIC).load(str(tmp_path))
        with pytest.raises(Exception, match=r"call tierlog\.pipeline\.register\(spark\)"):
            frame.count()
    finally:
        register(spark)
    assert frame.count() == 10


def test_planning_errors_keep_their_tierlog_type(spark: SparkSession, tmp_path: Path) -> None:
    write_log(tmp_path, TopicPartition(TOPIC, 0), 10)
    frame = (
        spark.read.format("tierlog")
        .option("subscribe", TOPIC)
        .option("startingOffsets", "latest")
        .load(str(tmp_path))
    )
    with pytest.raises(Exception, match="InvalidOptionError: startingOffsets cannot be latest"):
        frame.count()
