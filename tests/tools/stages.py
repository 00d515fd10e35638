"""Run ``make test``'s stages in order and print how long each took.

``make test`` is long (about 40 minutes with the tool cache warm, most of an hour
cold); the table at the end says where the time went, also when a stage fails, so a
slow or failing CI run is read at a glance. Standard library only, like bootstrap.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence


def _run_stage(make: str, target: str) -> int:
    print(f"\n=== make {target}", flush=True)
    return subprocess.run([make, target], check=False).returncode


def _report(times: Sequence[tuple[str, float, int]], total: float) -> None:
    print("\n=== stages")
    for target, seconds, code in times:
        result = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"  {target:<12} {seconds:8.0f} s   {result}")
    print(f"  {'total':<12} {total:8.0f} s")


def main(targets: Sequence[str]) -> int:
    """Each target in turn (stopping at the first that fails); the times at the end."""
    make = os.environ.get("MAKE", "make")
    times: list[tuple[str, float, int]] = []
    started = time.monotonic()
    code = 0
    for target in targets:
        stage_started = time.monotonic()
        code = _run_stage(make, target)
        times.append((target, time.monotonic() - stage_started, code))
        if code != 0:
            break
    _report(times, time.monotonic() - started)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
