"""Real ``tierlog-sidecar`` processes on loopback, the one launcher every test uses.

``start_sidecar(data_dir, *configs)`` runs the installed console script with
``--listen 127.0.0.1:PORT`` and its output in ``DATA_DIR.log`` beside the data dir, and
returns once the process logs ``listening on HOST:PORT`` (its address).  ``port=0``
(the default) lets the kernel pick a free port at the first start; ``start()`` again
(after ``kill()`` or ``stop()``) comes back on that port, where its clients expect it,
and appends to the same log.  A port picked beforehand (``free_port()``) lets brokers
list each other in ``tierlog.cluster.brokers``.  ``Sidecars`` remembers what it started
and kills what is still running when the test ends (the fixtures of each test folder).

Importable as ``tests.support.sidecars``: pytest's importlib mode names modules under
the rootdir by their path (``tests.storage.conftest``), and ``pythonpath = ["."]`` in
pyproject.toml makes ``tests`` a namespace package from any test folder.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self, TypeVar

from tierlog.cli.loopback_ports import FIRST_UNPRIVILEGED_PORT, ephemeral_start, free_ports

__all__ = ["SidecarProcess", "Sidecars", "console_script", "free_port", "start_sidecar"]

_LISTENING = re.compile(r"listening on (\S+)")
_S = TypeVar("_S", bound="SidecarProcess")


def console_script(name: str) -> str:
    """The path of an installed console script of this venv (``tierlog``, ``tierlog-sidecar``)."""
    script = shutil.which(name, path=str(Path(sys.executable).parent))
    assert script is not None, f"the {name} console script is not installed"
    return script


def free_port() -> int:
    """A loopback port free now, for a process that binds it later (a broker whose peers
    must know its address first). Each pytest-xdist worker picks from its own slice of
    the ports below the kernel's ephemeral range, so two workers never hand out the same
    port, and no outgoing connection takes it meanwhile (``loopback_ports``)."""
    return free_ports(1, within=_worker_ports())[0]


def _worker_ports() -> range:
    """This worker's slice: ``gw0`` the first of ``PYTEST_XDIST_WORKER_COUNT`` slices,
    a run without workers all of them."""
    ports = range(FIRST_UNPRIVILEGED_PORT, ephemeral_start())
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return ports
    count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    size = len(ports) // count
    first = ports.start + int(worker[2:]) * size
    return range(first, first + size)


@dataclass
class SidecarProcess:
    data_dir: Path
    configs: tuple[str, ...] = ()
    port: int = 0  # 0: a free one below the ephemeral range, kept for restarts
    env: Mapping[str, str] | None = None  # None: this process's environment
    config_file: Path | None = None  # --config-file, under the --config pairs
    # Every --data-dir, in order, when there are several (data_dir still names the log).
    data_dirs: tuple[Path, ...] = ()
    process: subprocess.Popen[bytes] = field(init=False)
    address: str = field(init=False, default="")

    @property
    def log_path(self) -> Path:
        return self.data_dir.with_name(self.data_dir.name + ".log")

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start(self, timeout_s: float = 30) -> Self:
        if self.port == 0:  # kept across restarts: not one an outgoing connection may take
            self.port = free_port()
        command = [console_script("tierlog-sidecar")]
        for data_dir in self.data_dirs or (self.data_dir,):
            command += ["--data-dir", str(data_dir)]
        command += ["--listen", f"127.0.0.1:{self.port}"]
        if self.config_file is not None:
            command += ["--config-file", str(self.config_file)]
        for config in self.configs:
            command += ["--config", config]
        earlier = self.log_path.stat().st_size if self.log_path.exists() else 0  # a restart
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                command,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=None if self.env is None else dict(self.env),
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = _LISTENING.findall(self.output[earlier:])
            if found:
                self.address = found[-1]
                self.port = int(self.address.rpartition(":")[2])
                self.started()
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.process.kill()
        self.process.wait()
        raise AssertionError(f"the sidecar did not start:\n{self.output}")

    def started(self) -> None:
        """Called once the sidecar listens (subclasses open their channels here)."""

    def kill(self) -> None:
        """kill -9: no flush, no checkpoints, no clean-shutdown marker."""
        self.process.kill()
        self.process.wait()

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM (a graceful shutdown), then the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout_s)

    def assert_alive(self) -> None:
        assert self.process.poll() is None, f"the sidecar died:\n{self.output}"

    def rss_bytes(self) -> int:
        """The process's resident memory now (``VmRSS`` of ``/proc/PID/status``)."""
        return self._status_bytes("VmRSS")

    def peak_rss_bytes(self) -> int:
        """The most resident memory the process has held (``VmHWM``)."""
        return self._status_bytes("VmHWM")

    def _status_bytes(self, field: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"no {field}")


def start_sidecar(
    data_dir: Path, *configs: str, port: int = 0, env: Mapping[str, str] | None = None
) -> SidecarProcess:
    return SidecarProcess(data_dir, configs, port, env).start()


class Sidecars:
    """The sidecars a test started, killed at its end if still running."""

    def __init__(self) -> None:
        self.started: list[SidecarProcess] = []

    def add(self, sidecar: _S) -> _S:
        self.started.append(sidecar)
        return sidecar

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.kill_all()

    def kill_all(self) -> None:
        for sidecar in self.started:
            if hasattr(sidecar, "process") and sidecar.process.poll() is None:
                sidecar.kill()
