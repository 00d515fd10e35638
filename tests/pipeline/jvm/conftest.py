"""JVMs with ``tierlog.spark.io`` compiled into them, driven over py4j (the bridge pyspark
itself uses), so tests call the Java API as the Spark reader does.

``jvm`` is one JVM for the session; ``fresh_jvm`` is one for a single test, for a test
that leaves the JVM changed (py4j runs the calls of a connection on one Java thread, and
an interrupted read leaves that thread's interrupt flag set, as Java asks).

A JVM's stderr comes back line by line in ``Jvm.stderr``: it is where the reader logs each
retry, which is how a test knows an attempt failed before it heals the fault.

Once a SparkSession exists in the test process (the reader's tests in this folder make
one), PySpark has hooked py4j's answer parsing to turn Java exceptions into its own
through *its* gateway; an exception of these JVMs must come back as py4j raised it, so
each test that uses one runs with py4j's own parser (``py4j_parsing``).
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import py4j.java_gateway
import py4j.protocol
import pytest
from py4j.java_gateway import JavaGateway

from tests.support.jvm_classes import compile_package
from tests.tools.bootstrap import java_bin

__all__ = ["Jvm", "fresh_jvm", "jvm", "jvm_classes"]


@dataclass(frozen=True)
class Jvm:
    gateway: Any  # py4j's JavaGateway (untyped)
    stderr: queue.Queue[str]

    @property
    def io(self) -> Any:
        """The ``tierlog.spark.io`` package, as py4j sees it."""
        return self.gateway.jvm.tierlog.spark.io

    def drain_stderr(self) -> None:
        """Forget what earlier tests logged."""
        while True:
            try:
                self.stderr.get_nowait()
            except queue.Empty:
                return

    def wait_for_stderr(self, fragment: str, timeout_s: float = 60) -> str:
        """The first line (from now on) that contains ``fragment``."""
        while True:
            line = self.stderr.get(timeout=timeout_s)
            if fragment in line:
                return line


def launched(classes: Path) -> Iterator[Jvm]:
    stderr: queue.Queue[str] = queue.Queue()
    gateway = JavaGateway.launch_gateway(
        classpath=str(classes),
        die_on_exit=True,
        redirect_stderr=stderr,
        java_path=str(java_bin("java")),
    )
    try:
        yield Jvm(gateway, stderr)
    finally:
        gateway.shutdown()
        gateway.java_process.stdin.close()  # die_on_exit: the JVM ends with its stdin
        gateway.java_process.wait(timeout=30)


@pytest.fixture(scope="session")
def jvm_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_package("tierlog.spark.io", tmp_path_factory.mktemp("jvm-classes"))


@pytest.fixture
def py4j_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(py4j.java_gateway, "get_return_value", py4j.protocol.get_return_value)


@pytest.fixture(scope="session")
def jvm_process(jvm_classes: Path) -> Iterator[Jvm]:
    yield from launched(jvm_classes)


@pytest.fixture
def jvm(jvm_process: Jvm, py4j_parsing: None) -> Jvm:
    return jvm_process


@pytest.fixture
def fresh_jvm(jvm_classes: Path, py4j_parsing: None) -> Iterator[Jvm]:
    yield from launched(jvm_classes)
