"""Who to wake when something a pass reads changes: passes follow watched changes.

A cluster's pass reads more than its own object: its pods, StatefulSet and ConfigMaps
(the brokers' partition state among them), and its topics; a topic's pass reads its
cluster's pods. kopf tells the operator about changes to each of those objects, and a
pass of every object that reads it is woken at once, instead of every object polling on
a short timer. Each object's pass runs in a daemon that sleeps until it is woken, until
its next resync (a longer timer, for what no watch shows: a node's zone, a Secret), or,
while it waits on something only the brokers can tell (a sidecar becoming safe to
restart, a drain, a plan a broker has not taken), until a short poll.

A pod's change wakes only the topics that wait for the brokers (their last pass did not
sync them): a synced topic stays on its brokers' volumes whatever their pods do, and
with a thousand topics one pod event that woke them all cost a thousand passes. A change
of the cluster itself still wakes every topic.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kopf

__all__ = ["ClusterKey", "Wakeups", "sleep_until_woken", "woken_event"]

ClusterKey = tuple[str, str]  # (namespace, cluster name)


def woken_event(memo: Any) -> asyncio.Event:
    """The object's own wake-up, shared by its handlers and its daemon (kopf's ``memo``
    is one per object): set by whichever comes first, so a change seen before the
    daemon started still wakes it."""
    if "woken" not in memo:
        memo["woken"] = asyncio.Event()
    woken: asyncio.Event = memo["woken"]
    return woken


class Wakeups:
    """The daemons that read each cluster: its own, and its topics'."""

    def __init__(self) -> None:
        self._clusters: dict[ClusterKey, set[asyncio.Event]] = defaultdict(set)
        self._topics: dict[ClusterKey, set[asyncio.Event]] = defaultdict(set)
        self._waiting: set[asyncio.Event] = set()  # topics whose last pass did not sync

    @contextmanager
    def cluster(self, key: ClusterKey, woken: asyncio.Event) -> Iterator[None]:
        """While the cluster's daemon runs, ``woken`` is set by changes to what it reads."""
        with _member(self._clusters, key, woken):
            yield

    @contextmanager
    def topic(self, key: ClusterKey, woken: asyncio.Event) -> Iterator[None]:
        """While a topic's daemon runs, ``woken`` is set by changes to its cluster's pods."""
        self._waiting.add(woken)  # until its first pass says otherwise
        try:
            with _member(self._topics, key, woken):
                yield
        finally:
            self._waiting.discard(woken)

    def topic_waits(self, woken: asyncio.Event, waiting: bool) -> None:
        """Whether the topic whose daemon waits on ``woken`` waits for its brokers."""
        if waiting:
            self._waiting.add(woken)
        else:
            self._waiting.discard(woken)

    def wake_cluster(self, key: ClusterKey) -> None:
        for woken in self._clusters.get(key, ()):
            woken.set()

    def wake_topics(self, key: ClusterKey) -> None:
        for woken in self._topics.get(key, ()):
            woken.set()

    def wake_waiting_topics(self, key: ClusterKey) -> None:
        for woken in self._topics.get(key, ()):
            if woken in self._waiting:
                woken.set()


@contextmanager
def _member(
    groups: dict[ClusterKey, set[asyncio.Event]], key: ClusterKey, woken: asyncio.Event
) -> Iterator[None]:
    groups[key].add(woken)
    try:
        yield
    finally:
        groups[key].discard(woken)
        if not groups[key]:
            del groups[key]


async def sleep_until_woken(
    woken: asyncio.Event, stopped: kopf.DaemonStopped, delay_s: float
) -> None:
    """Return once ``woken`` is set, kopf stops the daemon, or ``delay_s`` has passed."""

    async def until_stopped() -> None:
        await stopped.wait()

    waits = {asyncio.create_task(woken.wait()), asyncio.create_task(until_stopped())}
    try:
        await asyncio.wait(waits, timeout=delay_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()
