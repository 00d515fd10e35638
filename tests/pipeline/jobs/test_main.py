"""``tierlog-spark`` as users run it: the installed command in its own process, with its
own Spark session; what it says and its exit code (0 done, 1 problems found, 2 error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.pipeline.conftest import SMALL_SEGMENTS, produce, records_for
from tests.pipeline.tiering import flip_a_byte_of_the_second_segment, tier_closed_segments
from tierlog.pipeline.jobs.commit_log import last_commit
from tierlog.storage.log import Log
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.topic_partition import TopicPartition

pytestmark = pytest.mark.slow

TOPIC = "orders"
COMMAND = Path(sys.executable).with_name("tierlog-spark")


def tierlog_spark(*args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.run(
        [str(COMMAND), "--master", "local[1]", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def written_log(log_dir: Path, partition: int, count: int) -> Log:
    log = Log.open(log_dir / TopicPartition(TOPIC, partition).dir_name, SMALL_SEGMENTS)
    produce(log, records_for(count))
    return log


def test_export_writes_and_commits_the_topic(tmp_path: Path) -> None:
    for partition in range(2):
        written_log(tmp_path / "logs", partition, 120).close()
    output = tmp_path / "parquet"

    done = tierlog_spark(
        "export", "--path", str(tmp_path / "logs"), "--topic", TOPIC, "--output", str(output)
    )

    assert done.returncode == 0, done.stderr
    assert "export: run 1 committed: 240 records" in done.stdout
    commit = last_commit(output)
    assert commit is not None and commit.next_offsets == {0: 120, 1: 120}
    assert sum(pq.read_metadata(output / name).num_rows for name in commit.files) == 240


def test_export_of_a_missing_log_dir_fails_with_the_reason(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"

    failed = tierlog_spark(
        "export", "--path", str(missing), "--topic", TOPIC, "--output", str(tmp_path / "out")
    )

    assert failed.returncode == 2
    assert f"tierlog-spark export: path {missing} is not a log dir" in failed.stderr


def test_audit_exits_1_and_reports_the_damaged_segment(tmp_path: Path) -> None:
    store = LocalDirectoryStore(tmp_path / "tier")
    log = written_log(tmp_path / "logs", 0, 600)
    tier_closed_segments(store, TopicPartition(TOPIC, 0), log)
    log.close()
    victim = flip_a_byte_of_the_second_segment(store, TopicPartition(TOPIC, 0))
    report = tmp_path / "audit.json"

    found = tierlog_spark("audit", store.url, "--report", str(report))

    assert found.returncode == 1, found.stderr
    assert list(json.loads(report.read_text())["problems"]) == [victim]
    assert json.loads(found.stdout) == json.loads(report.read_text())
