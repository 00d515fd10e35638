"""What ``Producer.send`` returns: a light per-record future over one result per batch.

Kafka's ``ProduceRequestResult`` and ``FutureRecordMetadata``: the sender completes a
batch once (its base offset and log-append time, or its error), and each record's
future reads its own metadata from that on demand, at ``base offset + its index``.
So a batch of a thousand records costs one completion and no per-record work unless
the application asks: a ``RecordMetadata`` is made only for a ``result()`` or a
callback.  Callbacks run in record order on the thread that completes the batch (the
producer's sender), as Kafka's do on its I/O thread: keep them short.

A batch the producer had to split before sending (see ``ProducerBatch.split``)
*chains* its result to its parts': a record's future then follows its record into
the part that holds it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Callback", "ProduceRequestResult", "RecordFuture", "RecordMetadata"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RecordMetadata:
    """Where a record was stored (offset -1 with ``acks=0``, or for a duplicate older than
    the broker's cache).  Not frozen: a frozen dataclass costs several times more to
    make, and one is made per acknowledged record."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # the broker's LogAppendTime, else the record's CreateTime


# Kafka's ``Callback.onCompletion(metadata, exception)``: exactly one of them is None.
Callback = Callable[[RecordMetadata | None, BaseException | None], None]


class ProduceRequestResult:
    """One batch's outcome, shared by the futures of its records."""

    def __init__(self, topic: str, partition: int, timestamps: Sequence[int]) -> None:
        self.topic = topic
        self.partition = partition
        self._timestamps = timestamps  # the records' CreateTimes, in record order
        self._settled_or_split = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[tuple[int, Callback]] = []
        self._completed = False
        self._base_offset = -1
        self._log_append_time = -1
        self._error: BaseException | None = None
        self._parts: list[tuple[int, ProduceRequestResult]] = []  # (first index, part)

    @property
    def done(self) -> bool:
        return self._completed

    @property
    def error(self) -> BaseException | None:
        return self._error

    def metadata(self, index: int) -> RecordMetadata:
        """Record ``index``'s metadata; only once completed without an error."""
        offset = self._base_offset + index if self._base_offset >= 0 else -1
        timestamp = self._log_append_time if self._log_append_time >= 0 else self._timestamps[index]
        return RecordMetadata(self.topic, self.partition, offset, timestamp)

    def add_callback(self, index: int, callback: Callback) -> None:
        """Call ``callback`` for record ``index`` on completion (now, if completed)."""
        with self._lock:
            if not self._completed and not self._parts:
                self._callbacks.append((index, callback))
                return
        owner, at = self.locate(index)
        if owner is self:
            self._call(index, callback)
        else:
            owner.add_callback(at, callback)

    def add_callback_while_open(self, index: int, callback: Callback) -> None:
        """``add_callback`` for the producer, while the batch is still taking records
        under its lock: it cannot complete or split meanwhile, so no lock is needed."""
        self._callbacks.append((index, callback))

    def complete(
        self, base_offset: int, log_append_time: int, error: BaseException | None = None
    ) -> None:
        """Settle the batch once and run the callbacks, in record order."""
        with self._lock:
            if self._completed:
                return
            self._base_offset = base_offset
            self._log_append_time = log_append_time
            self._error = error
            self._completed = True
            callbacks, self._callbacks = self._callbacks, []
        self._settled_or_split.set()
        if error is not None or base_offset < 0 or log_append_time >= 0:
            for index, callback in callbacks:
                self._call(index, callback)
            return
        # The common case, a thousand callbacks a batch: each record's metadata made inline.
        topic, partition, timestamps = self.topic, self.partition, self._timestamps
        for index, callback in callbacks:
            try:
                callback(
                    RecordMetadata(topic, partition, base_offset + index, timestamps[index]), None
                )
            except Exception:
                log.exception("a producer callback raised")

    def _call(self, index: int, callback: Callback) -> None:
        try:
            if self._error is None:
                callback(self.metadata(index), None)
            else:
                callback(None, self._error)
        except Exception:  # a callback's failure is the application's, not the batch's
            log.exception("a producer callback raised")

    def chain(self, parts: Sequence[tuple[int, ProduceRequestResult]]) -> None:
        """The batch was split into ``parts`` (each with its first record's index):
        callbacks move to the part holding their record, and so do waiters."""
        with self._lock:
            self._parts = list(parts)
            callbacks, self._callbacks = self._callbacks, []
        self._settled_or_split.set()
        for index, callback in callbacks:
            owner, at = self.locate(index)
            owner.add_callback(at, callback)

    def locate(self, index: int) -> tuple[ProduceRequestResult, int]:
        """The result that settles record ``index`` (split or not) and its index there."""
        result = self
        while result._parts:
            for first, part in reversed(result._parts):
                if index >= first:
                    result, index = part, index - first
                    break
        return result, index

    def wait(self, index: int, timeout_s: float | None) -> tuple[ProduceRequestResult, int]:
        """Wait until record ``index`` is settled, following splits; where it was settled.
        ``TimeoutError`` (``concurrent.futures``') after ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            result, at = self.locate(index)
            if result._completed:
                return result, at
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not result._settled_or_split.wait(remaining) and remaining is not None:
                raise concurrent.futures.TimeoutError()


# Shared by every RecordFuture: ``concurrent.futures.wait`` and ``as_completed`` hold a
# future's condition only while they look at its state and add their waiter, which a
# record's settling never needs (its waiters are told through a done callback).
_WAIT_CONDITION = threading.Condition()


class _Waiters(list[Any]):
    """A RecordFuture's ``_waiters`` as ``concurrent.futures.wait`` uses them: each one
    added is told of the record through a done callback."""

    __slots__ = ("_future",)

    def __init__(self, future: RecordFuture) -> None:
        super().__init__()
        self._future = future

    def append(self, waiter: Any) -> None:
        super().append(waiter)
        self._future.add_done_callback(waiter.add_result)


class RecordFuture(concurrent.futures.Future[RecordMetadata]):
    """One record's future, awaitable from an event loop: ``metadata = await
    producer.send(...)``; a ``concurrent.futures.Future`` for ``asyncio.wrap_future``,
    ``concurrent.futures.wait`` and ``as_completed``.

    It skips ``Future.__init__`` (a condition and three lists per record): its state is
    its batch's, and the little of ``Future``'s machinery that ``wait`` and
    ``as_completed`` reach is made on first use (``_condition``, ``_state``,
    ``_waiters``). A record cannot be cancelled once handed to the producer."""

    __slots__ = ("_batch", "_index")

    def __init__(self, result: ProduceRequestResult, index: int) -> None:
        self._batch = result
        self._index = index

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        return _WAIT_CONDITION

    @property
    def _state(self) -> str:  # type: ignore[override]
        return "FINISHED" if self.done() else "PENDING"

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]
        waiters: list[Any] | None = self.__dict__.get("_waiters")
        if waiters is None:
            waiters = self.__dict__["_waiters"] = _Waiters(self)
        return waiters

    def cancel(self) -> bool:
        return False

    def set_running_or_notify_cancel(self) -> bool:
        raise RuntimeError("a record's future is settled by its producer")

    def set_result(self, result: RecordMetadata) -> None:
        raise RuntimeError("a record's future is settled by its producer")

    def set_exception(self, exception: BaseException | None) -> None:
        raise RuntimeError("a record's future is settled by its producer")

    def __repr__(self) -> str:
        return f"<RecordFuture {'done' if self.done() else 'pending'}>"

    def done(self) -> bool:
        return self._batch.locate(self._index)[0].done

    def running(self) -> bool:
        return not self.done()

    def cancelled(self) -> bool:
        return False  # a record handed to the producer cannot be taken back

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Its metadata once stored; raises its error, or ``TimeoutError`` after ``timeout``."""
        result, index = self._batch.wait(self._index, timeout)
        if result.error is not None:
            raise result.error
        return result.metadata(index)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._batch.wait(self._index, timeout)[0].error

    def add_done_callback(self, fn: Callable[[RecordFuture], object]) -> None:
        """``fn(self)`` once the record is stored or failed (at once if it is); ``fn``
        is always given this RecordFuture, so it may be typed for one."""

        def call(_metadata: RecordMetadata | None, _error: BaseException | None) -> None:
            fn(self)

        self._batch.add_callback(self._index, call)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        """Wait in the running loop (the sender thread wakes it) for the metadata."""
        loop = asyncio.get_running_loop()
        settled: asyncio.Future[None] = loop.create_future()

        def wake(_future: RecordFuture) -> None:
            # A loop closed meanwhile raises RuntimeError: nobody waits any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, settled)

        self.add_done_callback(wake)
        yield from settled.__await__()
        return self.result()


def _settle(settled: asyncio.Future[None]) -> None:
    if not settled.done():  # cancelled by its awaiting task meanwhile
        settled.set_result(None)
