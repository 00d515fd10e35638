"""``tierlog.pipeline.jars``: the Spark source's jars are built once, from a copy of the
Java sources here, and again only when those change."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from tierlog.pipeline import jars
from tierlog.pipeline.errors import JvmSourceError

pytestmark = pytest.mark.slow


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of pipeline/jvm, built into a jars dir of its own."""
    copy = tmp_path / "jvm"
    shutil.copytree(jars.JVM_PROJECT, copy)
    out = tmp_path / "jars"
    monkeypatch.setattr(jars, "JVM_PROJECT", copy)
    monkeypatch.setattr(jars, "JARS_DIR", out)
    monkeypatch.setattr(jars, "SOURCE_JAR", out / jars.SOURCE_JAR.name)
    monkeypatch.setattr(jars, "KAFKA_CLIENTS_JAR", out / jars.KAFKA_CLIENTS_JAR.name)
    monkeypatch.setattr(jars, "_STAMP", out / "inputs.sha256")
    return copy


def test_the_jars_are_built_once_and_again_when_a_source_changes(project: Path) -> None:
    source_jar, clients_jar = jars.classpath()
    with zipfile.ZipFile(source_jar) as built:
        names = set(built.namelist())
    assert "tierlog/spark/TierlogProvider.class" in names
    assert "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister" in names
    assert clients_jar.name == f"kafka-clients-{jars.KAFKA_CLIENTS_VERSION}.jar"
    first_build = source_jar.stat().st_mtime_ns

    assert jars.classpath() == [source_jar, clients_jar]
    assert source_jar.stat().st_mtime_ns == first_build  # fresh: not built again

    planner = project / "src/main/java/tierlog/spark/Planner.java"
    planner.write_text(planner.read_text() + "\n// changed\n")
    jars.classpath()
    assert source_jar.stat().st_mtime_ns != first_build


def test_without_jars_or_sources_the_error_says_so(project: Path) -> None:
    shutil.rmtree(project)
    with pytest.raises(JvmSourceError, match="no Java sources to build it from"):
        jars.classpath()
