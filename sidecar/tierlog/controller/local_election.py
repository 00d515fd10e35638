"""One controller per machine: whichever process holds the controller lock runs it.

Every broker process started by ``tierlog cluster up`` runs a ``LocalControllerElection``
on the same lock file. It tries the lock without waiting, every ``interval_s``; the one
that takes it runs controller passes for as long as it lives. A holder killed with
``kill -9`` loses the lock with its descriptor, and another process's next try takes it.
Two controllers at once would still be safe (every change is a compare-and-swap), only
wasteful. On Kubernetes the operator runs the controller instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from tierlog.controller.controller import Controller, run_passes
from tierlog.file_lock import try_exclusive_lock

__all__ = ["LocalControllerElection"]

log = logging.getLogger(__name__)


class LocalControllerElection:
    def __init__(
        self,
        lock_path: Path,
        controller: Controller,
        interval_s: float,
        on_elected: Callable[[], None] = lambda: None,
    ) -> None:
        self.lock_path = lock_path
        self._controller = controller
        self._interval_s = interval_s
        self._on_elected = on_elected
        self._elected = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="tierlog-controller-election", daemon=True
        )

    @property
    def is_controller(self) -> bool:
        return self._elected.is_set()

    @property
    def controller(self) -> Controller:
        """The controller this process runs while it holds the lock (its passes' counts)."""
        return self._controller

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop trying (or controlling) and release the lock for another process."""
        self._stopping.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        standing_by = False
        while not self._stopping.is_set():
            held = try_exclusive_lock(self.lock_path)
            if held is None:
                if not standing_by:
                    log.info("Another process holds %s: standing by", self.lock_path)
                    standing_by = True
                self._stopping.wait(self._interval_s)
                continue
            try:
                log.info("Holding %s: this process is the controller", self.lock_path)
                self._elected.set()
                self._on_elected()
                run_passes(self._controller, self._interval_s, self._stopping)
            finally:
                self._elected.clear()
                held.release()
