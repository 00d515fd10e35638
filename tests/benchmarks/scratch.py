"""What a benchmark run starts and ends with: a scratch directory that is removed after
the run, and a first line saying on what machine, and at what load, the figures were
taken (the machine is shared: a figure without its load says little)."""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["machine_line", "run_in_scratch"]


def run_in_scratch(prefix: str, where: Path | None, run: Callable[[Path], None]) -> None:
    """``run(scratch)`` in a fresh directory under ``where`` (the system's temp dir when
    None), removed afterwards whatever happened."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    try:
        run(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def machine_line() -> str:
    return (
        f"# {platform.node()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f} at start, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
