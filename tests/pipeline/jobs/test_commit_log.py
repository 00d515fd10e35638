"""The export's commit log: the last commit wins, and recovery removes what an
uncommitted run left (no JVM)."""

from __future__ import annotations

from pathlib import Path

from tierlog.pipeline.jobs.commit_log import (
    Commit,
    data_file_name,
    last_commit,
    recover,
    staging_dir,
    write_commit,
)


def test_recovery_keeps_committed_runs_and_removes_later_files_and_staging(
    tmp_path: Path,
) -> None:
    day = tmp_path / "partition=0" / "date=2023-11-14"
    day.mkdir(parents=True)
    (day / data_file_name(1, "part-0.parquet")).write_bytes(b"committed")
    write_commit(tmp_path, Commit(1, "orders", {0: 10}, ("x",), 10))
    (day / data_file_name(2, "part-0.parquet")).write_bytes(b"crashed run")
    staging_dir(tmp_path, 2).mkdir(parents=True)

    removed = recover(tmp_path)

    assert [path.name for path in removed] == [data_file_name(2, "part-0.parquet")]
    assert [path.name for path in day.iterdir()] == [data_file_name(1, "part-0.parquet")]
    assert not staging_dir(tmp_path, 2).exists()
    assert last_commit(tmp_path) == Commit(1, "orders", {0: 10}, ("x",), 10)


def test_no_commit_yet_means_a_first_run(tmp_path: Path) -> None:
    assert last_commit(tmp_path) is None
    assert recover(tmp_path) == []
