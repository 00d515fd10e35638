"""Append notifications for long polls and subscriptions, per partition, on the event loop.

A waiter takes the partition's current event *before* it reads the log; an append
(which returns to the loop from its thread) sets that event and drops it, so the next
waiter gets a fresh one. A read that found nothing therefore never misses an append
that landed after it: that append set the event the reader is about to wait on. No
polling, and a partition with no waiters costs nothing.

A fetch session waits on many partitions at once: rather than one waiter per
partition, it ``listen``s, and each append calls it back with the partition, on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from tierlog.storage.topic_partition import TopicPartition

__all__ = ["AppendListener", "AppendWatch"]

# Told each partition appended to (or whose role changed), on the loop.
AppendListener = Callable[[TopicPartition], None]


class AppendWatch:
    """Per-partition wake-ups; ``close`` wakes everyone for shutdown."""

    def __init__(self) -> None:
        self._events: dict[TopicPartition, asyncio.Event] = {}
        self._listeners: dict[TopicPartition, set[AppendListener]] = {}
        self._closed = asyncio.Event()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def event(self, tp: TopicPartition) -> asyncio.Event:
        """The event the next append to ``tp`` sets; take it before reading."""
        event = self._events.get(tp)
        if event is None:
            event = self._events[tp] = asyncio.Event()
        return event

    def listen(self, tp: TopicPartition, listener: AppendListener) -> None:
        """Call ``listener`` at each append to ``tp`` until ``unlisten``."""
        self._listeners.setdefault(tp, set()).add(listener)

    def unlisten(self, tp: TopicPartition, listener: AppendListener) -> None:
        listeners = self._listeners.get(tp)
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del self._listeners[tp]

    def appended(self, tp: TopicPartition) -> None:
        event = self._events.pop(tp, None)
        if event is not None:
            event.set()
        for listener in list(self._listeners.get(tp, ())):
            listener(tp)

    def deleted(self, topic: str) -> None:
        """Wake the waiters on ``topic``'s partitions: their next read finds it deleted."""
        watched = {*self._events, *self._listeners}
        for tp in [tp for tp in watched if tp.topic == topic]:
            self.appended(tp)

    async def wait(self, event: asyncio.Event, timeout_s: float | None) -> None:
        """Until ``event`` is set, the watch closes, or ``timeout_s`` passes."""
        await self.wait_any((event,), timeout_s)

    async def wait_any(self, events: Iterable[asyncio.Event], timeout_s: float | None) -> None:
        """Until one of ``events`` is set, the watch closes, or ``timeout_s`` passes."""
        if self.closed or (timeout_s is not None and timeout_s <= 0):
            return
        waiters = {asyncio.ensure_future(event.wait()) for event in events}
        waiters.add(asyncio.ensure_future(self._closed.wait()))
        try:
            await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def until_closed(self) -> None:
        await self._closed.wait()

    def close(self) -> None:
        self._closed.set()
        for event in self._events.values():
            event.set()
        self._events.clear()
