"""One broker process's controller election, as a test runs it in a real process.

``python -m tests.support.controller_process LOCK STATE_DIR`` runs a
``LocalControllerElection`` on the lock file over a ``LocalStateStore`` in STATE_DIR,
passes every 50 ms, and logs to stdout one line per event ("standing by", "is the
controller", each election), until SIGTERM stops it cleanly (exit 0).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

from tierlog.controller.controller import Controller
from tierlog.controller.local_election import LocalControllerElection
from tierlog.partition_state.local_store import LocalStateStore

INTERVAL_S = 0.05


def main(lock_path: Path, state_dir: Path) -> None:
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    election = LocalControllerElection(
        lock_path, Controller(LocalStateStore(state_dir)), INTERVAL_S
    )
    election.start()
    stopping.wait()
    election.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
