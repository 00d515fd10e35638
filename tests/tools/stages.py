"""Run ``make test``'s stages in order and print how long each took.

``make test`` is long (about 40 minutes with the tool cache warm, more than an hour of
compiling on a machine with no cache); the table at the end says where the time went,
also when a stage fails, so a slow or failing CI run is read at a glance.

A stage written ``&name`` runs in the background at the lowest CPU priority (nice 19)
from where it is listed, its output kept in ``.cache/stages/name.log`` and printed when
it is waited for; the last stage waits for it first. That is how the one-node cluster's
tools (compiled for about 25 minutes cold, needed only by the e2e stage) build on the
cores the lint, type and unit stages leave idle, without taking CPU from a test that
is waiting on a deadline. Standard library only, like bootstrap.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

LOG_DIR = Path(__file__).resolve().parents[2] / ".cache" / "stages"
BACKGROUND = "&"


@dataclass
class Stage:
    target: str
    started: float
    seconds: float = 0.0
    code: int | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def background(self) -> bool:
        return self.process is not None


def _make() -> str:
    return os.environ.get("MAKE", "make")


def _run(target: str) -> Stage:
    print(f"\n=== make {target}", flush=True)
    stage = Stage(target, time.monotonic())
    stage.code = subprocess.run([_make(), target], check=False).returncode
    stage.seconds = time.monotonic() - stage.started
    return stage


def _start_behind(target: str) -> Stage:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / f"{target}.log"
    print(f"\n=== make {target} (in the background at nice 19; output in {log})", flush=True)
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["nice", "-n", "19", _make(), target], stdout=output, stderr=subprocess.STDOUT
        )
    return Stage(target, time.monotonic(), process=process)


def _wait(stage: Stage) -> None:
    assert stage.process is not None
    print(f"\n=== waiting for make {stage.target}", flush=True)
    stage.code = stage.process.wait()
    stage.seconds = time.monotonic() - stage.started
    sys.stdout.write((LOG_DIR / f"{stage.target}.log").read_text(errors="replace"))
    sys.stdout.flush()


def _report(stages: Sequence[Stage], total: float) -> None:
    print("\n=== stages")
    for stage in stages:
        result = "ok" if stage.code == 0 else f"FAILED (exit {stage.code})"
        if stage.code is None:
            result = "stopped"
        where = " (background)" if stage.background else ""
        print(f"  {stage.target:<14} {stage.seconds:8.0f} s   {result}{where}")
    print(f"  {'total':<14} {total:8.0f} s")


def run_stages(targets: Sequence[str]) -> int:
    """Each target in turn, ``&`` ones behind the others (stopping at the first that
    fails); the times at the end."""
    started = time.monotonic()
    stages: list[Stage] = []
    failed = 0
    for index, target in enumerate(targets):
        if target.startswith(BACKGROUND):
            stages.append(_start_behind(target.removeprefix(BACKGROUND)))
            continue
        if index == len(targets) - 1:
            for behind in (stage for stage in stages if stage.background):
                _wait(behind)
                failed = failed or (behind.code or 0)
            if failed:
                break
        stage = _run(target)
        stages.append(stage)
        if stage.code:
            failed = stage.code
            break
    for behind in (stage for stage in stages if stage.background and stage.code is None):
        assert behind.process is not None
        behind.process.terminate()
        behind.process.wait()
    _report(stages, time.monotonic() - started)
    return failed


if __name__ == "__main__":
    sys.exit(run_stages(sys.argv[1:]))
