"""Fixtures for the CLI tests (the helpers live in ``segments``), and a real sidecar
(``server``: its address) for the data commands."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .segments import WrittenLog, write_log

_LISTENING = re.compile(r"listening on (\S+)")


@pytest.fixture
def written_log(tmp_path: Path) -> WrittenLog:
    """A closed partition that tierlog wrote: several segments, every codec."""
    return write_log(tmp_path / "topic-0")


def console_script(name: str) -> str:
    script = shutil.which(name, path=str(Path(sys.executable).parent))
    assert script is not None, f"the {name} console script is not installed"
    return script


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A ``tierlog-sidecar`` on a free loopback port: its HOST:PORT."""
    log_path = tmp_path / "sidecar.log"
    command = [console_script("tierlog-sidecar"), "--data-dir", str(tmp_path / "data")]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [*command, "--listen", "127.0.0.1:0"], stdout=log_file, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while not (found := _LISTENING.search(log_path.read_text(errors="replace"))):
            assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        yield found.group(1)
    finally:
        process.kill()
        process.wait()
