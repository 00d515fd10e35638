"""Which Python Spark starts for the data source's workers.

Spark runs its Python workers with ``PYSPARK_PYTHON``, else the ``python3`` on its
``PATH``: from a virtualenv that is not activated that is the system's Python, which
has no tierlog, and every task dies with ``ModuleNotFoundError: No module named
'tierlog'``. In local mode the workers run on this machine, so the driver's own
interpreter is the right one when the user named none; a Python they named must import
tierlog, or registration fails saying what to set. On a cluster the executors' Python
is theirs to set (docs/SPARK.md), and nothing here can see it.

A worker, once started, is reused for task after task, and after each one Spark's
daemon runs a full ``gc.collect()``. That collection visits every object the worker
holds: with pyspark, pyarrow, pandas and the pipeline imported, ~70 k of them and
50-250 ms a task on the benchmark's machine, a third of a full scan's worker time
(docs/BENCHMARKS.md). Nearly all of them are modules, classes and functions that live
as long as the process, so a task moves what is alive when it starts out of the
collector's sight (``gc.freeze``), and the collection after it looks at what the task
made.
"""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Mapping

from tierlog.pipeline.errors import InvalidOptionError

__all__ = ["freeze_long_lived_objects", "worker_python"]

_IMPORT_TIMEOUT_SECONDS = 120  # a cold interpreter importing pyarrow on a busy machine


def _imports_tierlog(python: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-c", "import tierlog.pipeline.arrow_batches"],
            capture_output=True,
            timeout=_IMPORT_TIMEOUT_SECONDS,
            check=False,
        )
    except OSError:  # not there, or not a program
        return False
    return done.returncode == 0


def worker_python(master: str, python_exec: str, environ: Mapping[str, str]) -> str:
    """The Python the workers of a session on ``master`` should run, whose context says
    ``python_exec`` (SparkContext's ``pythonExec``); ``environ`` tells whether the user
    named it (``PYSPARK_PYTHON``).

    Raises ``InvalidOptionError`` when a local session's named Python cannot import
    tierlog.
    """
    if not master.startswith("local"):
        return python_exec
    if "PYSPARK_PYTHON" not in environ:
        return sys.executable
    if not _imports_tierlog(python_exec):
        raise InvalidOptionError(
            f"Spark's Python workers run PYSPARK_PYTHON={python_exec}, which cannot import "
            f"tierlog: set PYSPARK_PYTHON={sys.executable} (this Python) before the "
            "SparkSession starts, or install tierlog[spark] into that Python"
        )
    return python_exec


def freeze_long_lived_objects() -> None:
    """Leave the objects alive now out of every later collection of this process.

    Called as a task starts in a Spark worker: what is alive then survived the full
    collection after the last task, so it is the process's own (modules, caches), and
    the daemon's collection after this task need not visit it again.
    """
    gc.freeze()
