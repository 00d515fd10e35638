"""The sidecar's HTTP endpoint: ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz``.

It starts before recovery, so the recovery's progress can be scraped and the pod's
probes get an answer from the first second. Kubernetes reads the two probes
differently, and they answer different questions:

- ``/healthz`` (liveness: restart me if this fails): the process's event loop still
  turns. A task beats every second; if no beat came for ``stall_after_s`` the loop
  is wedged and the answer is 503. A slow recovery is not a failure of liveness.
- ``/readyz`` (readiness: send me traffic): 200 only while the logs are recovered and
  the gRPC port serves; 503 while starting, recovering and from the moment shutdown
  begins, so Services stop routing to a broker that is going away. Under the phase,
  one line per partition whose remote tier is unusable (uploads stopped or failing):
  said, never failed on, since the broker still serves its local data.

The server is the standard library's WSGI server with a thread per request, off the
event loop: a scrape never waits behind gRPC work, nor gRPC behind a scrape.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from tierlog.sidecar.metrics import SidecarMetrics
from tierlog.storage.tier.remote_log_manager import RemoteLogManager

__all__ = ["Phase", "ProbeServer", "Probes", "tier_detail"]

_StartResponse = Callable[..., Any]


class Phase(enum.Enum):
    STARTING = "starting"
    RECOVERING = "recovering"
    SERVING = "serving"
    STOPPING = "stopping"


class Probes:
    """The process's phase and heartbeat, as the probes report them."""

    def __init__(self, metrics: SidecarMetrics, stall_after_s: float = 30.0):
        self.metrics = metrics
        self.phase = Phase.STARTING
        self.stall_after_s = stall_after_s
        self._last_beat = time.monotonic()
        self.detail: Callable[[], list[str]] = list  # lines /readyz adds under the phase

    def enter(self, phase: Phase) -> None:
        self.phase = phase
        self.metrics.ready.set(1 if phase is Phase.SERVING else 0)

    @property
    def ready(self) -> bool:
        return self.phase is Phase.SERVING

    @property
    def alive(self) -> bool:
        return time.monotonic() - self._last_beat < self.stall_after_s

    async def beat(self, interval_s: float = 1.0) -> None:
        """Run on the event loop for as long as the process lives."""
        while True:
            self._last_beat = time.monotonic()
            await asyncio.sleep(interval_s)


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a line per scrape is noise


class ProbeServer:
    def __init__(self, probes: Probes):
        self.probes = probes
        self._metrics_app = make_wsgi_app(probes.metrics.registry)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self, listen: str) -> str:
        """Serve on ``host:port`` (port 0: any free one); returns the bound address."""
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        self._server = make_server(
            host, int(port), self._app, server_class=_ThreadingServer, handler_class=_QuietHandler
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )
        self._thread.start()
        return f"{listen.rpartition(':')[0]}:{self._server.server_port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _app(self, environ: dict[str, Any], start_response: _StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            alive = self.probes.alive
            return _text(start_response, alive, "ok" if alive else "event loop stalled")
        if path == "/readyz":
            lines = [self.probes.phase.value, *self.probes.detail()]
            return _text(start_response, self.probes.ready, "\n".join(lines))
        if path in ("/metrics", "/"):
            answer: Iterable[bytes] = self._metrics_app(environ, start_response)
            return answer
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics, /healthz or /readyz\n"]


def _text(start_response: _StartResponse, ok: bool, body: str) -> list[bytes]:
    status = "200 OK" if ok else "503 Service Unavailable"
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [body.encode() + b"\n"]


def tier_detail(manager: RemoteLogManager) -> Callable[[], list[str]]:
    """The readiness lines for ``manager``'s partitions whose tier is unusable."""

    def lines() -> list[str]:
        return [
            f"tier unusable for {problem.tp.dir_name}: {problem.state}: {problem.detail}"
            for problem in manager.problems()
        ]

    return lines
