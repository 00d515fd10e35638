"""One controller per machine, in real processes: two broker processes try the lock,
one controls; ``kill -9`` of it hands the lock to the other, which then elects."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tierlog.file_lock import try_exclusive_lock
from tierlog.partition_state.lease_keeper import LeaseKeeper
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import PartitionState

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0
ELECTED, STANDING_BY = "this process is the controller", "standing by"


class Broker:
    """A process running the machine's controller election; its stdout lines go to a
    queue shared by all, as (process, line)."""

    def __init__(
        self, name: str, lock: Path, state: Path, lines: queue.Queue[tuple[str, str]]
    ) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.controller_process", str(lock), str(state)],
            cwd=REPO, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, args=(lines,), daemon=True).start()

    def _read(self, lines: queue.Queue[tuple[str, str]]) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            lines.put((self.name, line.strip()))


def _next_event(lines: queue.Queue[tuple[str, str]], *wanted: str) -> tuple[str, str]:
    """The next line (from any process) holding one of ``wanted``: (process, line)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        name, line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        if any(word in line for word in wanted):
            return name, line


def test_the_other_process_takes_over_the_controller_when_the_holder_is_killed(
    tmp_path: Path,
) -> None:
    lock, state_dir = tmp_path / "controller.lock", tmp_path / "state"
    store = LocalStateStore(state_dir)
    lines: queue.Queue[tuple[str, str]] = queue.Queue()
    brokers = {name: Broker(name, lock, state_dir, lines) for name in ("a", "b")}
    try:
        first = dict([_next_event(lines, ELECTED, STANDING_BY) for _ in range(2)])
        assert sorted(first.values()) == [
            f"Another process holds {lock}: {STANDING_BY}",
            f"Holding {lock}: {ELECTED}",
        ], first  # exactly one controls while both run
        holder = next(name for name, line in first.items() if ELECTED in line)
        other = next(name for name in brokers if name != holder)

        os.kill(brokers[holder].process.pid, signal.SIGKILL)
        assert brokers[holder].process.wait(timeout=DEADLINE_S) == -signal.SIGKILL
        assert _next_event(lines, ELECTED) == (other, f"Holding {lock}: {ELECTED}")

        # the new controller works: broker 1 never renews, broker 2 keeps its lease
        store.create_topic("orders", {0: PartitionState.new((1, 2))})
        store.acquire_lease(1, "broker-1-a", 1.0)
        keeper = LeaseKeeper(store, 2, "broker-2-a", 1.0)
        keeper.start()
        try:
            name, line = _next_event(lines, "Elected leader")
        finally:
            keeper.stop()
        assert name == other
        assert line.startswith("Elected leader 2 for partition orders-0 in leader epoch 1")
        assert store.read_topic("orders")[0] == PartitionState((1, 2), 2, 1, (2,), 1)

        brokers[other].process.send_signal(signal.SIGTERM)
        assert brokers[other].process.wait(timeout=DEADLINE_S) == 0  # a clean stop
        freed = try_exclusive_lock(lock)  # ... that released the lock
        assert freed is not None
        freed.release()
    finally:
        for broker in brokers.values():
            if broker.process.poll() is None:
                broker.process.kill()
            broker.process.wait(timeout=DEADLINE_S)
