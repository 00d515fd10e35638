"""Installing the Python planner into a session's JVM (``tierlog.pipeline.register``).

The JVM source finds its planner in a static holder (``tierlog.spark.Planners``); py4j's
callback server, which PySpark's ``foreachBatch`` uses too, carries the JVM's calls back
to this process. A session started without the jars on its classpath has no holder:
that is said here, with what to set, rather than at the first query.

The session's Python workers (the audit job's tasks run Python) are pointed at this
interpreter in local mode (``workers.worker_python``).
"""

from __future__ import annotations

import os

from py4j.java_gateway import JavaPackage
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession

from tierlog.pipeline.errors import JvmSourceError
from tierlog.pipeline.jvm_planner import JvmPlanner
from tierlog.pipeline.workers import worker_python

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Install the planner in ``spark``'s JVM; ``JvmSourceError`` if the jars are missing."""
    context = spark.sparkContext
    context.pythonExec = worker_python(context.master or "", context.pythonExec, os.environ)
    jvm = context._jvm
    assert jvm is not None
    planners = jvm.tierlog.spark.Planners
    if isinstance(planners, JavaPackage):  # py4j's name for a class the JVM does not have
        raise JvmSourceError(
            'format("tierlog") is not on this session\'s classpath: build the session with '
            "tierlog.pipeline.configure(SparkSession.builder), or set spark.jars to the jars "
            "`python -m tierlog.pipeline.jars` prints, before the session starts"
        )
    gateway = context._gateway
    assert gateway is not None
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    planners.install(JvmPlanner())
