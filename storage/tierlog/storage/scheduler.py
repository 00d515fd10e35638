"""A named background thread that runs one job every interval until stopped.

Kafka runs its log jobs (retention, flushes, checkpoints) on a shared scheduler; a
thread per job is as simple and, for a handful of jobs, as cheap. A job that raises
is logged and tried again at the next interval: one bad pass must not stop the job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["PeriodicTask"]

log = logging.getLogger(__name__)


class PeriodicTask:
    def __init__(self, name: str, interval_ms: int, job: Callable[[], object]):
        self.name = name
        self.interval_s = interval_ms / 1000
        self._job = job
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._job()
            except Exception:
                log.exception("%s failed; trying again in %.1fs", self.name, self.interval_s)
