"""Install the third-party tools the tests run against into ``.cache/tools/``.

Run by ``make tools``. Standard library only: it runs before anything else exists.

Each tool is one ``Tool`` entry: a name, the files whose content decides what gets
installed (hashed into a stamp), and an ``install`` function that fills a fresh
directory. A tool is installed into ``<name>.partial`` and renamed into place only
once complete, with the stamp written last, so an interrupted run never leaves a
half-installed tool that looks finished. A second run with unchanged inputs is a
no-op. Any failure exits non-zero with the reason and the failing command's output.

A tool that needs more than a few lines gets its own module beside this one (``helm.py``,
``prometheus.py``, ``minio.py``, ``control_plane.py``) built from the shared parts in
``toolkit.py``, and one entry in ``TOOLS``.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Run as a script, Python puts tests/tools on the path; the tool modules import as
# ``tests.tools.*`` like everything else, so the checkout's root goes first.
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.tools.base_image import BASE_IMAGE  # noqa: E402
from tests.tools.cluster_dns import COREDNS  # noqa: E402
from tests.tools.control_plane import ETCD, KUBERNETES  # noqa: E402
from tests.tools.cri_tools import CRI_TOOLS  # noqa: E402
from tests.tools.franz_go import FRANZ_GO  # noqa: E402
from tests.tools.helm import HELM  # noqa: E402
from tests.tools.kube_node import KUBE_NODE  # noqa: E402
from tests.tools.minio import MINIO  # noqa: E402
from tests.tools.monitoring_crds import MONITORING_CRDS  # noqa: E402
from tests.tools.node_packages import NODE_PACKAGES  # noqa: E402
from tests.tools.prometheus import PROMETHEUS  # noqa: E402
from tests.tools.toolkit import (  # noqa: E402
    CACHE_DIR,
    STAMP_NAME,
    BootstrapError,
    Tool,
    require,
    run,
)

__all__ = [
    "BUF",
    "BUF_VERSION",
    "CACHE_DIR",
    "CLUSTER_TOOLS",
    "KAFKA",
    "KAFKA_VERSION",
    "SPARK_KAFKA",
    "TOOLS",
    "BootstrapError",
    "Tool",
    "buf_bin",
    "java_bin",
    "main",
]

KAFKA_VERSION = "4.1.1"
KAFKA_POM = REPO / "tests" / "tools" / "kafka" / "pom.xml"
JAVA_HELPERS_DIR = REPO / "tests" / "interop" / "java"

BUF_VERSION = "1.75.0"  # must match tests/tools/buf/package.json
BUF_PACKAGE_JSON = REPO / "tests" / "tools" / "buf" / "package.json"


def java_bin(program: str = "java") -> Path:
    """The JDK program the tests use: $JAVA_HOME/bin/<program> if set, else PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / program
        if not candidate.is_file():
            raise BootstrapError(f"JAVA_HOME={java_home} has no bin/{program}")
        return candidate
    return require(program, "install a JDK 17+ (e.g. apt-get install openjdk-17-jdk-headless)")


# --- Apache Kafka ---------------------------------------------------------------------------


def _copy_maven_dependencies(what: str, pom: Path, libs: Path) -> None:
    """The runtime classpath ``pom`` names, resolved by Maven into ``libs``."""
    mvn = require("mvn", "install Maven 3.8+ (e.g. apt-get install maven)")
    print(f"  resolving {what} jars from {pom.relative_to(REPO)} with Maven")
    run(
        [
            mvn,
            "--batch-mode",
            "--quiet",
            "-Dstyle.color=never",
            "--file",
            pom,
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={libs}",
        ],
        what="mvn dependency:copy-dependencies",
    )
    print(f"  {len(list(libs.glob('*.jar')))} jars")


def _kafka_inputs() -> list[Path]:
    return [KAFKA_POM, *sorted(JAVA_HELPERS_DIR.glob("*.java"))]


def _install_kafka(home: Path) -> None:
    """Kafka's runtime classpath into libs/, our Java helpers compiled into classes/."""
    java, javac = java_bin("java"), java_bin("javac")
    libs = home / "libs"
    _copy_maven_dependencies(f"Kafka {KAFKA_VERSION}", KAFKA_POM, libs)
    sources = sorted(JAVA_HELPERS_DIR.glob("*.java"))
    if sources:
        classes = home / "classes"
        print(f"  compiling {len(sources)} Java helpers from {JAVA_HELPERS_DIR.relative_to(REPO)}")
        run(
            [javac, "-nowarn", "-d", classes, "-cp", f"{libs}/*", *sources],
            what="javac of the interop helpers",
        )
    version = run(
        [java, "-cp", f"{libs}/*", "kafka.tools.DumpLogSegments", "--version"],
        what="smoke test: kafka.tools.DumpLogSegments --version",
    ).strip()
    if KAFKA_VERSION not in version:
        raise BootstrapError(f"expected Kafka {KAFKA_VERSION}, DumpLogSegments says {version!r}")
    print(f"  DumpLogSegments runs: {version}")


KAFKA = Tool(name=f"kafka-{KAFKA_VERSION}", inputs=_kafka_inputs, install=_install_kafka)


# --- Spark's Kafka source (spark-sql-kafka-0-10) ------------------------------------------

SPARK_KAFKA_VERSION = "4.2.0"  # must match tests/tools/spark_kafka/pom.xml
SPARK_KAFKA_POM = REPO / "tests" / "tools" / "spark_kafka" / "pom.xml"


def _install_spark_kafka(home: Path) -> None:
    """The connector's jars (beyond those pyspark ships) into libs/, for ``spark.jars``."""
    _copy_maven_dependencies(
        f"spark-sql-kafka-0-10 {SPARK_KAFKA_VERSION}", SPARK_KAFKA_POM, home / "libs"
    )


SPARK_KAFKA = Tool(
    name=f"spark-kafka-{SPARK_KAFKA_VERSION}",
    inputs=lambda: [SPARK_KAFKA_POM],
    install=_install_spark_kafka,
)


# --- buf (from the npm registry) ------------------------------------------------------------


def _buf_inputs() -> list[Path]:
    return [BUF_PACKAGE_JSON]


def _install_buf(home: Path) -> None:
    """``@bufbuild/buf`` pinned by tests/tools/buf/package.json; its platform binary
    comes in the package's optional dependency for this OS and CPU."""
    npm = require("npm", "install Node.js 18+ with npm (e.g. apt-get install nodejs npm)")
    shutil.copy2(BUF_PACKAGE_JSON, home / "package.json")
    print(f"  installing @bufbuild/buf {BUF_VERSION} with npm")
    run(
        [npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=error"],
        what="npm install @bufbuild/buf",
        cwd=home,
    )
    version = run([buf_bin(home), "--version"], what="smoke test: buf --version").strip()
    if version != BUF_VERSION:
        raise BootstrapError(f"expected buf {BUF_VERSION}, `buf --version` says {version!r}")
    print(f"  buf runs: {version}")


BUF = Tool(name=f"buf-{BUF_VERSION}", inputs=_buf_inputs, install=_install_buf)


def buf_bin(home: Path | None = None) -> Path:
    """The buf executable inside an installed buf tool (``BUF.home`` by default)."""
    return (home or BUF.home) / "node_modules" / ".bin" / "buf"


TOOLS: tuple[Tool, ...] = (
    KAFKA,
    SPARK_KAFKA,
    BUF,
    HELM,
    PROMETHEUS,
    MONITORING_CRDS,
    MINIO,
    ETCD,
    KUBERNETES,
    FRANZ_GO,
)

# The one-node cluster's (``make cluster``, tests/support/cluster/): the control plane's
# tools plus these. ``make test`` installs them through its ``e2e`` step
# (``make cluster-tools``): they install Debian packages and build for minutes more.
CLUSTER_TOOLS: tuple[Tool, ...] = (
    ETCD,
    KUBERNETES,
    HELM,
    MINIO,  # the e2e tests' tier
    KUBE_NODE,
    COREDNS,
    CRI_TOOLS,
    NODE_PACKAGES,
    BASE_IMAGE,
)


# --- driver ---------------------------------------------------------------------------------

# Compiling from the Go module proxy keeps both cores busy (``Tool.compiled``); the other
# installs mostly wait on the network and the disk (Maven, npm, apt, debootstrap). The two
# kinds run side by side, each in its own order, so a cold machine's downloads hide
# behind its compiles.


@dataclass
class Installed:
    """What one tool's ensure took: ``seconds`` of wall time, ``built`` False when current."""

    name: str
    seconds: float
    built: bool


def ensure(tool: Tool) -> Installed:
    if tool.is_current():
        print(f"{tool.name}: up to date ({tool.home.relative_to(REPO)})", flush=True)
        return Installed(tool.name, 0.0, built=False)
    print(f"{tool.name}: installing into {tool.home.relative_to(REPO)}", flush=True)
    started = time.monotonic()
    partial = tool.home.with_name(tool.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        tool.install(partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    (partial / STAMP_NAME).write_text(tool.input_hash() + "\n")
    shutil.rmtree(tool.home, ignore_errors=True)
    partial.rename(tool.home)
    seconds = time.monotonic() - started
    print(f"{tool.name}: installed in {seconds:.1f} s", flush=True)
    return Installed(tool.name, seconds, built=True)


class _Lane(threading.Thread):
    """Installs its tools in order and stops at the first failure, keeping it."""

    def __init__(self, name: str, tools: Sequence[Tool]) -> None:
        super().__init__(name=name)
        self.tools = tools
        self.installed: list[Installed] = []
        self.failure: BootstrapError | None = None

    def run(self) -> None:
        try:
            for tool in self.tools:
                self.installed.append(ensure(tool))
        except BootstrapError as exc:
            self.failure = exc


def _report(lanes: Sequence[_Lane], seconds: float) -> None:
    print(f"\ntools: {seconds:.0f} s in all, by lane (compiles beside downloads):")
    for lane in lanes:
        for done in lane.installed:
            what = f"{done.seconds:7.1f} s" if done.built else "  up to date"
            print(f"  {lane.name:<8} {done.name:<48} {what}")


def install_all(tools: Sequence[Tool]) -> int:
    """Every tool of ``tools``, compiles in one lane and the rest in another."""
    lanes = [
        _Lane("compile", [tool for tool in tools if tool.compiled]),
        _Lane("fetch", [tool for tool in tools if not tool.compiled]),
    ]
    started = time.monotonic()
    for lane in lanes:
        lane.start()
    for lane in lanes:
        lane.join()
    _report(lanes, time.monotonic() - started)
    failures = [lane.failure for lane in lanes if lane.failure is not None]
    for failure in failures:
        print(f"\nbootstrap FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


# ``make test`` installs the two halves apart: the compiled ones in the background from the
# start, behind the fetched ones and the unit tests that need no Go tool (stages.py).
_SELECTIONS = {
    "--cluster": CLUSTER_TOOLS,
    "--fetched": tuple(tool for tool in TOOLS if not tool.compiled),
    "--compiled": tuple(tool for tool in TOOLS if tool.compiled),
}


def main(argv: Sequence[str] = ()) -> int:
    """Install every tool of ``make test`` (with ``--cluster``, of ``make cluster``; with
    ``--fetched`` or ``--compiled``, only those of ``make test`` that are),
    compiles beside downloads, or only those named, in order."""
    selections = [_SELECTIONS[flag] for flag in argv if flag in _SELECTIONS]
    if len(selections) > 1:
        print(f"bootstrap: at most one of {sorted(_SELECTIONS)}", file=sys.stderr)
        return 2
    tools = selections[0] if selections else TOOLS
    wanted = set(argv) - set(_SELECTIONS)
    unknown = wanted - {tool.name for tool in tools}
    if unknown:
        print(f"bootstrap: unknown tools {sorted(unknown)}", file=sys.stderr)
        return 2
    if not wanted:
        return install_all(tools)
    try:
        for tool in tools:
            if tool.name in wanted:
                ensure(tool)
    except BootstrapError as exc:
        print(f"\nbootstrap FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
