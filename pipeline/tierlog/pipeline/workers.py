"""Which Python Spark starts for the session's Python workers (the audit job's tasks).

Spark runs its Python workers with ``PYSPARK_PYTHON``, else the ``python3`` on its
``PATH``: from a virtualenv that is not activated that is the system's Python, which
has no tierlog, and every task dies with ``ModuleNotFoundError: No module named
'tierlog'``. In local mode the workers run on this machine, so the driver's own
interpreter is the right one when the user named none; a Python they named must import
tierlog, or registration fails saying what to set. On a cluster the executors' Python
is theirs to set (docs/SPARK.md), and nothing here can see it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping

from tierlog.pipeline.errors import InvalidOptionError

__all__ = ["worker_python"]

_IMPORT_TIMEOUT_SECONDS = 120  # a cold interpreter on a busy machine


def _imports_tierlog(python: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-c", "import tierlog.pipeline.jobs.audit_job"],
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
