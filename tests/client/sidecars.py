"""Real ``tierlog-sidecar`` processes for the client tests, on fixed loopback ports.

A fixed port (picked free beforehand) lets a test kill -9 a sidecar and start it again
where its clients expect it, and lets brokers list each other in
``tierlog.cluster.brokers``.  ``TcpProxy`` sits between a client and a sidecar and can
swallow the sidecar's answers, then cut every connection: a response lost after the
batch was stored.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LiveSidecar", "TcpProxy", "free_port", "start_sidecar"]

_LISTENING = re.compile(r"listening on (\S+)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _script() -> str:
    script = shutil.which("tierlog-sidecar", path=str(Path(sys.executable).parent))
    assert script is not None, "the tierlog-sidecar console script is not installed"
    return script


@dataclass
class LiveSidecar:
    data_dir: Path
    port: int
    configs: tuple[str, ...]
    process: subprocess.Popen[bytes] = field(init=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.with_name(self.data_dir.name + ".log")

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start(self, timeout_s: float = 30) -> LiveSidecar:
        command = [_script(), "--data-dir", str(self.data_dir), "--listen", self.address]
        for config in self.configs:
            command += ["--config", config]
        earlier = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if _LISTENING.search(self.output[earlier:]):
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.process.kill()
        raise AssertionError(f"the sidecar did not start:\n{self.output}")

    def kill(self) -> None:
        """kill -9: no flush, no checkpoints, no clean-shutdown marker."""
        self.process.kill()
        self.process.wait()

    def stop(self, timeout_s: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout_s)


def start_sidecar(data_dir: Path, *configs: str, port: int | None = None) -> LiveSidecar:
    return LiveSidecar(data_dir, port or free_port(), configs).start()


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; ``hold_responses`` drops what the target
    sends from then on, ``cut`` closes every connection (and forwards again)."""

    def __init__(self, target: str, port: int | None = None) -> None:
        host, _, target_port = target.rpartition(":")
        self.target = (host, int(target_port))
        self._server = socket.create_server(("127.0.0.1", port or 0))
        self.port: int = self._server.getsockname()[1]
        self._holding = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, is_response: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if is_response and self._holding.is_set():
                    continue
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def hold_responses(self) -> None:
        self._holding.set()

    def cut(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._holding.clear()

    def close(self) -> None:
        self._closed = True
        self._server.close()
        self.cut()
