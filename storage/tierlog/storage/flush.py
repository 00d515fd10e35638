"""Group commit: one flusher thread makes many partitions durable per round.

With ``flush.messages=1`` (the per-batch durable mode) every append waits until its
batch is on disk. Appenders on different partitions do not each call fsync in turn:
they queue their log and wait, and the flusher takes everything queued so far,
fsyncs each log once, and wakes all of them. A request that arrives while a round is
running joins the next one, so nobody is acknowledged before their bytes are synced.
The same thread also flushes logs whose ``flush.ms`` has elapsed, looking for them once
per check interval, not at every round, and only among logs that have a ``flush.ms``:
with Kafka's default (never) an idle broker's thousands of logs cost it nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from tierlog.storage.config import LONG_MAX
from tierlog.storage.errors import KafkaStorageError
from tierlog.storage.log import Log

__all__ = ["GroupCommitter"]

log = logging.getLogger(__name__)

_ROUNDS_KEPT = 64  # far more than can complete while a woken waiter waits for the lock


class GroupCommitter:
    """Batches flush requests from many appenders into shared fsync rounds."""

    def __init__(
        self,
        logs: Callable[[], Iterable[Log]],
        *,
        check_interval_ms: int = 1000,
        on_flush: Callable[[Log, float], None] | None = None,
    ):
        self._logs = logs
        self._check_interval_s = check_interval_ms / 1000
        self._on_flush = on_flush
        self._cond = threading.Condition()
        self._pending: set[Log] = set()
        self._started_round = 0
        self._completed_round = 0
        # Failures per round, so a waiter woken late still finds its own round's outcome.
        self._failures: dict[int, dict[Log, KafkaStorageError]] = {}
        self._running = False
        self._thread: threading.Thread | None = None
        self._next_time_check = 0.0  # time.monotonic() when flush.ms is next looked at

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="log-flusher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._running = False
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    def flush_and_wait(self, log_to_flush: Log) -> None:
        """Block until ``log_to_flush`` is synced up to its current end (an append's flush hook)."""
        with self._cond:
            if not self._running:
                log_to_flush.flush()
                return
            self._pending.add(log_to_flush)
            my_round = self._started_round + 1
            self._cond.notify_all()
            while self._completed_round < my_round and self._running:
                self._cond.wait()
            failure = self._failures.get(my_round, {}).get(log_to_flush)
        if failure is not None:
            raise failure
        if self._completed_round < my_round:  # stopped meanwhile: flush it ourselves
            log_to_flush.flush()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._pending and self._running:
                    self._cond.wait(self._check_interval_s)
                if not self._running and not self._pending:
                    return
                batch, self._pending = self._pending, set()
                self._started_round += 1
                this_round = self._started_round
            failures = self._flush_all(batch | set(self._due_by_time()))
            with self._cond:
                self._failures[this_round] = failures
                self._failures.pop(this_round - _ROUNDS_KEPT, None)
                self._completed_round = this_round
                self._cond.notify_all()

    def _due_by_time(self) -> list[Log]:
        """The logs whose ``flush.ms`` has elapsed, looked for once per check interval:
        with ``flush.messages=1`` a round runs at every fsync, and a look walks every log."""
        now = time.monotonic()
        if now < self._next_time_check:
            return []
        self._next_time_check = now + self._check_interval_s
        return [
            candidate
            for candidate in self._logs()
            if candidate.config.flush_ms != LONG_MAX  # never due (the default): no more work
            and candidate.unflushed_messages > 0
            and candidate.clock_ms() - candidate.last_flush_ms >= candidate.config.flush_ms
        ]

    def _flush_all(self, logs: Iterable[Log]) -> dict[Log, KafkaStorageError]:
        failures: dict[Log, KafkaStorageError] = {}
        for each in logs:
            started = time.monotonic()
            try:
                each.flush()
            except KafkaStorageError as error:
                log.error("flush of %s failed: %s", each, error)
                failures[each] = error
                continue
            if self._on_flush is not None:
                self._on_flush(each, time.monotonic() - started)
        return failures
