"""Run ``make test``'s stages in order and print how long each took.

``make test`` is long (tens of minutes, more with no tool cache); the table at the end
says where the time went, also when a stage fails, so a slow or failing CI run is read
at a glance.

A stage written ``&name`` runs in the background at the lowest CPU priority (nice 19)
from where it is listed, its output kept in ``.cache/stages/name.log``; ``&a,b`` runs
``a`` and then ``b`` there, ``b`` only if ``a`` passed. ``wait:name`` waits for a
background stage and prints its output, and the last stage waits for every one first.
That is how the Go tools (MinIO, etcd, kube-apiserver, helm; then the one-node
cluster's) compile on a cold machine while the lint, type and unit tests that need none
of them run, without taking CPU from a test that is waiting on a deadline: on 2 cores
the compiles alone are most of an hour (docs/BENCHMARKS.md). Standard library only,
like bootstrap.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

BACKGROUND = "&"
WAIT = "wait:"


def _log_dir() -> Path:
    return Path.cwd() / ".cache" / "stages"


def _make() -> str:
    return os.environ.get("MAKE", "make")


@dataclass
class Stage:
    target: str
    background: bool = False
    started: float | None = None
    seconds: float = 0.0
    code: int | None = None  # None: not run, or stopped before it ended
    waited: bool = False  # its output was printed by a wait
    done: threading.Event = field(default_factory=threading.Event)


def _run(target: str) -> Stage:
    print(f"\n=== make {target}", flush=True)
    started = time.monotonic()
    code = subprocess.run([_make(), target], check=False).returncode
    return Stage(target, started=started, seconds=time.monotonic() - started, code=code)


class _Behind(threading.Thread):
    """Background stages run one after another at nice 19, each logged to its file."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        super().__init__(name="stages-behind", daemon=True)
        self.stages = stages
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._stopped = False

    def run(self) -> None:
        for stage in self.stages:
            if not self._start(stage):
                break
            assert self._process is not None
            code = self._process.wait()
            stage.seconds = time.monotonic() - (stage.started or 0.0)
            with self._lock:
                stage.code = None if self._stopped else code  # a stop is no failure of its own
            stage.done.set()
            if stage.code != 0:
                break
        for stage in self.stages:  # those not reached are done too: they never will run
            stage.done.set()

    def _start(self, stage: Stage) -> bool:
        with self._lock:
            if self._stopped:
                return False
            _log_dir().mkdir(parents=True, exist_ok=True)
            with (_log_dir() / f"{stage.target}.log").open("wb") as output:
                # A process group of its own, so that a stop ends the compiles too; not a
                # session of its own: Linux's scheduler (autogroups) shares the CPU equally
                # between sessions whatever their processes' nice, and a compile in one of
                # its own took a whole core of two from the tests (docs/BENCHMARKS.md).
                self._process = subprocess.Popen(
                    ["nice", "-n", "19", _make(), stage.target],
                    stdin=subprocess.DEVNULL,  # a background group reading a terminal stops
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    process_group=0,
                )
            stage.started = time.monotonic()
            return True

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._process is not None and self._process.poll() is None:
                os.killpg(self._process.pid, signal.SIGTERM)
        self.join()


def _start_behind(targets: Sequence[str]) -> tuple[list[Stage], _Behind]:
    where = ", ".join(str(_log_dir() / f"{target}.log") for target in targets)
    print(f"\n=== make {' then '.join(targets)} (in the background at nice 19; {where})")
    stages = [Stage(target, background=True) for target in targets]
    behind = _Behind(stages)
    behind.start()
    return stages, behind


def _wait(stage: Stage) -> None:
    print(f"\n=== waiting for make {stage.target}", flush=True)
    stage.done.wait()
    stage.waited = True
    log = _log_dir() / f"{stage.target}.log"
    if stage.started is not None:
        sys.stdout.write(log.read_text(errors="replace"))
        sys.stdout.flush()


def _report(stages: Sequence[Stage], total: float) -> None:
    print("\n=== stages")
    for stage in stages:
        result = "ok" if stage.code == 0 else f"FAILED (exit {stage.code})"
        if stage.code is None:
            result = "not run" if stage.started is None else "stopped"
        where = " (background)" if stage.background else ""
        print(f"  {stage.target:<18} {stage.seconds:8.0f} s   {result}{where}")
    print(f"  {'total':<18} {total:8.0f} s")


def _failure(stage: Stage) -> int:
    """The exit code a waited-for stage makes the run fail with (0: it passed)."""
    if stage.code == 0:
        return 0
    return stage.code or 1  # never ran: the one before it in its chain failed


def run_stages(targets: Sequence[str]) -> int:
    """Each target in turn, ``&`` ones behind the others (stopping at the first that
    fails); the times at the end."""
    started = time.monotonic()
    stages: list[Stage] = []
    behinds: list[_Behind] = []
    failed = 0
    for index, target in enumerate(targets):
        if target.startswith(BACKGROUND):
            chain, behind = _start_behind(target.removeprefix(BACKGROUND).split(","))
            stages += chain
            behinds.append(behind)
            continue
        if target.startswith(WAIT):
            waited = [stage for stage in stages if stage.target == target.removeprefix(WAIT)]
            if not waited or not waited[0].background:
                print(f"stages: {target} names no background stage before it", file=sys.stderr)
                failed = 2
                break
            _wait(waited[0])
            failed = _failure(waited[0])
            if failed:
                break
            continue
        if index == len(targets) - 1:
            for unwaited in (stage for stage in stages if stage.background and not stage.waited):
                _wait(unwaited)
                failed = failed or _failure(unwaited)
            if failed:
                break
        stage = _run(target)
        stages.append(stage)
        if stage.code:
            failed = stage.code
            break
    for behind in behinds:
        behind.stop()
    _report(stages, time.monotonic() - started)
    return failed


if __name__ == "__main__":
    sys.exit(run_stages(sys.argv[1:]))
