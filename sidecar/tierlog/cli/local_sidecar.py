"""A ``tierlog-sidecar`` child process on loopback, for a command that brings its own broker.

``LocalSidecar.start(data_dir)`` runs the installed console script with ``--listen
127.0.0.1:0 --metrics-listen 127.0.0.1:0``: the kernel picks both ports and the process
logs them (``serving metrics at http://HOST:PORT/metrics``, ``listening on HOST:PORT``),
so no port is guessed and raced for.  Its output goes to ``tierlog-sidecar.log`` in the
data dir (the log manager only reads partition directories there), appended across
restarts.  It is ready when ``/readyz`` answers 200, which it does only once the logs
are recovered and the gRPC port serves.  ``spawn`` and ``wait_ready`` are ``start``'s
two halves, for a caller starting several brokers at once on ports fixed beforehand.

The child runs in a session of its own: a Ctrl-C at the terminal reaches only the
parent, which then stops the child in order (``stop``: SIGTERM, the sidecar's graceful
shutdown, and SIGKILL only if that outlasts the grace) instead of both racing; and a
child left running on purpose outlives the terminal.  Its waits (``wait_ready``,
``stop``) sleep through ``pause``: a command's ``StopSignals.pause`` ends them with
``Stopped`` at a stop signal (a second one during ``stop`` kills the child at once).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from prometheus_client.parser import text_string_to_metric_families

from tierlog.cli.stop_signals import STOP_SIGNALS, Pause
from tierlog.sidecar.restore import LOCAL_OUTPUT_LOG
from tierlog.sidecar.security import TOKEN_ENV

__all__ = [
    "LOG_NAME",
    "LocalSidecar",
    "SidecarFailed",
    "http_get",
    "metric_value",
    "sidecar_script",
]

LOG_NAME = LOCAL_OUTPUT_LOG  # a restore from the tier finds it in an empty data dir
_POLL_S = 0.05  # between looks at a starting or stopping child
_LISTENING = re.compile(r"listening on (\S+)")
_METRICS = re.compile(r"serving metrics at http://(\S+)/metrics")
_KAFKA = re.compile(r"serving Kafka's wire protocol on (\S+)")


class SidecarFailed(Exception):
    """The sidecar exited, or did not become ready in time."""


def sidecar_script() -> str:
    """The ``tierlog-sidecar`` installed beside this interpreter, else the one on PATH."""
    beside = shutil.which("tierlog-sidecar", path=str(Path(sys.executable).parent))
    script = beside or shutil.which("tierlog-sidecar")
    if script is None:
        raise SidecarFailed("the tierlog-sidecar console script is not installed")
    return script


def metric_value(exposition: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when none)."""
    total = 0.0
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                total += sample.value
    return total


def http_get(metrics_address: str, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
    """Status and body of ``path`` on a sidecar's metrics port (status 0: no answer)."""
    url = f"http://{metrics_address}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


@contextlib.contextmanager
def _stop_signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block is left, and are delivered then.  Only the
    main thread runs Python signal handlers (and may set them): elsewhere, nothing to do."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        held.append(signum)

    previous = {signum: signal.signal(signum, hold) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if held:
            signal.raise_signal(held[0])


@dataclass
class LocalSidecar:
    data_dir: Path
    command: tuple[str, ...]
    process: subprocess.Popen[bytes]
    log_start: int  # where this run's output begins in the log file
    address: str = ""  # gRPC HOST:PORT, once ready
    metrics_address: str = ""
    kafka_address: str = ""  # Kafka's wire protocol, once ready, if a listener asked it
    pause: Pause = time.sleep  # how its waits sleep: a command's ``StopSignals.pause``

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_NAME

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def output(self) -> str:
        """What this run of the process has logged so far."""
        with self.log_path.open("rb") as log_file:
            log_file.seek(self.log_start)
            return log_file.read().decode(errors="replace")

    @classmethod
    def start(
        cls,
        data_dir: Path,
        timeout_s: float = 20.0,
        configs: Sequence[str] = (),
        pause: Pause = time.sleep,
    ) -> LocalSidecar:
        """Start one on ``data_dir`` and wait until it is ready (stopped again if not);
        ``configs`` are broker settings as ``KEY=VALUE``."""
        sidecar = cls.spawn(data_dir, configs, pause=pause)
        try:
            sidecar.wait_ready(timeout_s)
        except BaseException:
            sidecar.stop()
            raise
        return sidecar

    @classmethod
    def spawn(
        cls,
        data_dir: Path,
        configs: Sequence[str] = (),
        listen: str = "127.0.0.1:0",
        metrics_listen: str = "127.0.0.1:0",
        pause: Pause = time.sleep,
    ) -> LocalSidecar:
        """Start one on ``data_dir`` without waiting (``wait_ready`` does), so that
        several brokers recover at once; ``listen`` fixed when other brokers must know
        it beforehand (``tierlog.cluster.brokers``)."""
        data_dir.mkdir(parents=True, exist_ok=True)
        command = (
            sidecar_script(),
            "--data-dir",
            str(data_dir),
            "--listen",
            listen,
            "--metrics-listen",
            metrics_listen,
            *(argument for pair in configs for argument in ("--config", pair)),
        )
        env = {key: value for key, value in os.environ.items() if key != TOKEN_ENV}
        log_path = data_dir / LOG_NAME
        log_start = log_path.stat().st_size if log_path.exists() else 0
        sidecar: LocalSidecar | None = None
        try:
            # A Ctrl-C between the fork and ``sidecar`` being set would leave the child
            # running, unseen (it is in a session of its own): it waits until then.
            with _stop_signals_held(), log_path.open("ab") as log_file:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
                sidecar = cls(data_dir, command, process, log_start, pause=pause)
        except BaseException:
            if sidecar is not None:
                sidecar.stop()
            raise
        return sidecar

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        """Return once ``/readyz`` answers 200 (the addresses then known); SidecarFailed
        if the process exits or is not ready within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            output = self.output
            if not self.metrics_address and (found := _METRICS.search(output)):
                self.metrics_address = found[1]
            listening = _LISTENING.search(output)
            if listening and self.metrics_address and self.http_get("/readyz")[0] == 200:
                self.address = listening[1]
                self.kafka_address = kafka[1] if (kafka := _KAFKA.search(output)) else ""
                return
            if self.process.poll() is not None:
                raise SidecarFailed(f"the sidecar exited with {self.process.returncode}:\n{output}")
            if time.monotonic() > deadline:
                raise SidecarFailed(f"the sidecar was not ready in time:\n{output}")
            self.pause(_POLL_S)

    def http_get(self, path: str) -> tuple[int, str]:
        """Status and body of ``path`` on the metrics port (status 0: no answer)."""
        return http_get(self.metrics_address, path)

    def scrape(self) -> str:
        status, body = self.http_get("/metrics")
        if status != 200:
            raise SidecarFailed(f"/metrics answered {status}")
        return body

    def stop(self, grace_s: float = 20.0) -> int:
        """SIGTERM and wait (SIGKILL after ``grace_s``, or at a second Ctrl-C: ``pause``
        raised); the exit status.  Stopping a stopped sidecar only returns its status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self._wait_exited(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
            except BaseException:  # a second Ctrl-C: the user would not wait
                self.process.kill()
                self.process.wait()
                raise
        return self.process.wait()

    def _wait_exited(self, timeout_s: float) -> None:
        """Polled, as ``Popen.wait`` with a timeout polls too, so that ``pause`` sleeps."""
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.command, timeout_s)
            self.pause(_POLL_S)
