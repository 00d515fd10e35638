"""Compile tierlog's JVM sources (``pipeline/jvm/src/main/java``) for a test run.

The Spark reader's Java is compiled the way its build compiles it, ``javac --release 17``
with every lint on and warnings as errors, one package at a time so a test compiles only
what it drives (``tierlog.spark.io`` needs nothing but the JDK).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.tools.bootstrap import java_bin

__all__ = ["JVM_SOURCES", "compile_package"]

JVM_SOURCES = Path(__file__).resolve().parents[2] / "pipeline" / "jvm" / "src" / "main" / "java"


def compile_package(package: str, classes: Path, classpath: Sequence[Path] = ()) -> Path:
    """The ``.java`` files of ``package`` (``tierlog.spark.io``) compiled into ``classes``."""
    sources = sorted((JVM_SOURCES / package.replace(".", "/")).glob("*.java"))
    if not sources:
        raise AssertionError(f"no Java sources for {package} under {JVM_SOURCES}")
    command = [str(java_bin("javac")), "--release", "17", "-Xlint:all", "-Werror"]
    command += ["-d", str(classes), "-cp", ":".join(str(path) for path in classpath) or "."]
    done = subprocess.run(
        [*command, *map(str, sources)], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"javac of {package} failed:\n{done.stdout}{done.stderr}")
    return classes
