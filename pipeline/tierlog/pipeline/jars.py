"""The JVM side of ``format("tierlog")``: ``tierlog-spark.jar`` and Kafka's client jar.

The Java sources (``pipeline/jvm/src/main``) are compiled with ``javac --release 17``
against the jars of the installed PySpark and ``kafka-clients``, which Maven copies from
Maven Central (``pipeline/jvm/pom.xml``). Both jars land in ``jars/`` beside this module
(not versioned), with a stamp of what they were built from: a build happens once, and
again only when the Java sources, the pom or the PySpark version change.
``python -m tierlog.pipeline.jars`` builds them (``make`` does), and ``classpath()``
builds them when they are missing or stale, so a session made with
``tierlog.pipeline.configure`` always has them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from tierlog.pipeline.errors import JvmSourceError

__all__ = ["KAFKA_CLIENTS_VERSION", "build", "classpath"]

KAFKA_CLIENTS_VERSION = "4.1.1"  # must match pipeline/jvm/pom.xml
JVM_PROJECT = Path(__file__).resolve().parents[2] / "jvm"
JARS_DIR = Path(__file__).resolve().parent / "jars"
SOURCE_JAR = JARS_DIR / "tierlog-spark.jar"
KAFKA_CLIENTS_JAR = JARS_DIR / f"kafka-clients-{KAFKA_CLIENTS_VERSION}.jar"
_STAMP = JARS_DIR / "inputs.sha256"


def classpath() -> list[Path]:
    """The jars to add to Spark's (``spark.jars``), built first when missing or stale."""
    with _lock():
        if not _is_fresh():
            build()
    return [SOURCE_JAR, KAFKA_CLIENTS_JAR]


def _inputs() -> Iterator[Path]:
    yield JVM_PROJECT / "pom.xml"
    yield from sorted(path for path in (JVM_PROJECT / "src").rglob("*") if path.is_file())


def _inputs_hash() -> str:
    """The sources, the pom and the PySpark compiled against (a new Spark rebuilds)."""
    import pyspark

    digest = hashlib.sha256(f"pyspark {pyspark.__version__}\n".encode())
    for path in _inputs():
        digest.update(path.relative_to(JVM_PROJECT).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _is_fresh() -> bool:
    if not (SOURCE_JAR.is_file() and KAFKA_CLIENTS_JAR.is_file() and _STAMP.is_file()):
        return False
    if not JVM_PROJECT.is_dir():  # installed without the sources: the built jars are all
        return True
    return _STAMP.read_text().strip() == _inputs_hash()


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """Held while checking and building: two sessions starting at once build once."""
    JARS_DIR.mkdir(parents=True, exist_ok=True)
    with (JARS_DIR / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _program(name: str, hint: str) -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / name).is_file():
        return str(Path(java_home) / "bin" / name)
    found = shutil.which(name)
    if found is None:
        raise JvmSourceError(f"building tierlog's Spark jar needs {name}: {hint}")
    return found


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise JvmSourceError(f"{what} failed:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")


def _spark_jars() -> Path:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    if not jars.is_dir():
        raise JvmSourceError(f"PySpark at {jars.parent} has no jars/ to compile against")
    return jars


def _fetch_kafka_clients(into: Path) -> None:
    mvn = _program("mvn", "install Maven 3.8+ (e.g. apt-get install maven)")
    _run(
        [
            mvn,
            "--batch-mode",
            "--quiet",
            "-Dstyle.color=never",
            "--file",
            str(JVM_PROJECT / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={into}",
        ],
        "mvn dependency:copy-dependencies of pipeline/jvm/pom.xml",
    )
    shutil.copy2(into / KAFKA_CLIENTS_JAR.name, KAFKA_CLIENTS_JAR)


def build() -> None:
    """Fetch kafka-clients, compile the sources into ``tierlog-spark.jar``, stamp both."""
    if not JVM_PROJECT.is_dir():
        raise JvmSourceError(
            f"no tierlog-spark.jar in {JARS_DIR} and no Java sources to build it from: "
            "install tierlog from a checkout, or from a wheel built after `make`"
        )
    javac = _program("javac", "install a JDK 17+ (e.g. apt-get install openjdk-17-jdk-headless)")
    JARS_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tierlog-jvm-") as scratch:
        work = Path(scratch)
        _fetch_kafka_clients(work / "deps")
        sources = sorted((JVM_PROJECT / "src" / "main" / "java").rglob("*.java"))
        classes = work / "classes"
        _run(
            [
                javac,
                "--release",
                "17",
                "-nowarn",
                "-d",
                str(classes),
                "-cp",
                f"{_spark_jars()}/*{os.pathsep}{KAFKA_CLIENTS_JAR}",
                *map(str, sources),
            ],
            "javac of pipeline/jvm/src/main/java",
        )
        partial = SOURCE_JAR.with_suffix(".jar.partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            for root in (classes, JVM_PROJECT / "src" / "main" / "resources"):
                for path in sorted(root.rglob("*")):
                    if path.is_file():
                        jar.write(path, path.relative_to(root).as_posix())
        partial.replace(SOURCE_JAR)
    _STAMP.write_text(_inputs_hash() + "\n")


if __name__ == "__main__":
    for jar in classpath():
        print(jar)
