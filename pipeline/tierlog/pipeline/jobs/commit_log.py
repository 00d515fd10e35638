"""The export's commit log: what each finished run wrote and where the next one starts.

An export run is visible only once its commit record exists. A run writes its
Parquet files into a staging directory, moves them into the output tree under names
that start with its run number (``run-00000007-...``), then writes its commit record
atomically (temporary file, fsync, rename, fsync of the directory). The next run starts
by ``recover``: the staging directory is emptied and every data file of a run number
above the last committed one is removed, so a crash at any point leaves neither a
partial nor a duplicate run behind, and the crashed run's records are exported again.

Layout under the output directory (Spark's readers skip names starting with ``_``):
``_tierlog_export/commits/<run:08d>.json`` and ``_tierlog_export/staging/``.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from tierlog.storage.checkpoints import atomic_write, fsync_directory

__all__ = [
    "Commit",
    "data_file_name",
    "last_commit",
    "recover",
    "staging_dir",
    "write_commit",
]

STATE_DIR = "_tierlog_export"
_COMMIT_NAME = re.compile(r"(\d{8})\.json")
_DATA_NAME = re.compile(r"run-(\d{8})-.*")


@dataclass(frozen=True)
class Commit:
    """One finished run: the next offset per partition after it, and its files."""

    run: int
    topic: str
    next_offsets: dict[int, int]
    files: tuple[str, ...]
    records: int

    def to_json(self) -> str:
        return json.dumps(
            {
                "run": self.run,
                "topic": self.topic,
                "next_offsets": {str(p): o for p, o in sorted(self.next_offsets.items())},
                "files": list(self.files),
                "records": self.records,
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> Commit:
        data = json.loads(text)
        return cls(
            run=int(data["run"]),
            topic=str(data["topic"]),
            next_offsets={int(p): int(o) for p, o in data["next_offsets"].items()},
            files=tuple(data["files"]),
            records=int(data["records"]),
        )


def _commits_dir(output: Path) -> Path:
    return output / STATE_DIR / "commits"


def staging_dir(output: Path, run: int) -> Path:
    return output / STATE_DIR / "staging" / f"run-{run:08d}"


def data_file_name(run: int, name: str) -> str:
    return f"run-{run:08d}-{name}"


def last_commit(output: Path) -> Commit | None:
    directory = _commits_dir(output)
    if not directory.is_dir():
        return None
    runs = sorted(
        int(match.group(1))
        for path in directory.iterdir()
        if (match := _COMMIT_NAME.fullmatch(path.name))
    )
    if not runs:
        return None
    return Commit.from_json((directory / f"{runs[-1]:08d}.json").read_text())


def recover(output: Path) -> list[Path]:
    """Remove what crashed runs left; returns the data files removed."""
    committed = last_commit(output)
    last_run = committed.run if committed else 0
    shutil.rmtree(output / STATE_DIR / "staging", ignore_errors=True)
    removed = []
    for path in sorted(output.glob("partition=*/date=*/run-*")):
        match = _DATA_NAME.fullmatch(path.name)
        if match and int(match.group(1)) > last_run:
            path.unlink()
            removed.append(path)
    for directory in {path.parent for path in removed}:
        fsync_directory(directory)
    return removed


def write_commit(output: Path, commit: Commit) -> None:
    """Make ``commit`` durable: after this the run counts as done."""
    directory = _commits_dir(output)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(directory / f"{commit.run:08d}.json", commit.to_json())
