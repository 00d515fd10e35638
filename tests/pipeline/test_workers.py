"""The Python a session's workers run: the driver's in local mode unless one is named,
and a named one that cannot import tierlog is refused with what to set (issue 21)."""

from __future__ import annotations

import sys

import pytest

from tierlog.pipeline.errors import InvalidOptionError
from tierlog.pipeline.workers import worker_python


def test_a_local_session_without_pyspark_python_runs_this_interpreter() -> None:
    assert worker_python("local[2]", "python3", {}) == sys.executable


def test_a_named_python_that_imports_tierlog_is_kept() -> None:
    assert (
        worker_python("local[*]", sys.executable, {"PYSPARK_PYTHON": sys.executable})
        == sys.executable
    )


@pytest.mark.parametrize("named", ["/bin/false", "/nonexistent/python3"])
def test_a_named_python_without_tierlog_fails_saying_what_to_set(named: str) -> None:
    with pytest.raises(InvalidOptionError, match=f"set PYSPARK_PYTHON={sys.executable}"):
        worker_python("local[2]", named, {"PYSPARK_PYTHON": named})


def test_a_cluster_session_keeps_what_the_executors_were_given() -> None:
    assert worker_python("yarn", "./env/bin/python", {}) == "./env/bin/python"
