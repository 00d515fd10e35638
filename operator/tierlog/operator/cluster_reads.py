"""A TierlogCluster and its broker pods, read once for every topic pass that asks at once.

A cluster's change (and the operator's start) wakes every topic of it in the same
moment, and each topic's pass begins by reading its cluster and its pods: with a
thousand topics that was two thousand identical requests. Here the asks of one moment
share one read, and the read is sent only after each of them asked, so no pass sees
the cluster as it was before what woke it; an ask that comes once a read is under way
waits for a read of its own.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from tierlog.operator.kube import Kube
from tierlog.operator.render.common import selector_labels
from tierlog.operator.spec import ClusterSpec

__all__ = ["ClusterBrokers", "ClusterReads"]


@dataclass(frozen=True)
class ClusterBrokers:
    """The cluster's object (None: there is none) and its broker pods, as read; shared
    by the passes that asked, so read-only."""

    body: dict[str, Any] | None
    pods: list[dict[str, Any]]


class ClusterReads:
    def __init__(self, kube: Kube):
        self._kube = kube
        self._next: dict[tuple[str, str], asyncio.Future[ClusterBrokers]] = {}  # not sent yet
        self._sending: set[asyncio.Task[None]] = set()  # held, as the loop holds tasks weakly

    async def read(self, namespace: str, name: str) -> ClusterBrokers:
        """The cluster ``name`` and its pods, read after this call began."""
        key = (namespace, name)
        pending = self._next.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._next[key] = pending
            task = asyncio.create_task(self._send(key, pending))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        return await asyncio.shield(pending)

    async def _send(self, key: tuple[str, str], answer: asyncio.Future[ClusterBrokers]) -> None:
        await asyncio.sleep(0)  # the other passes woken with this one ask meanwhile
        del self._next[key]  # asks from now on get a read sent after them
        try:
            answer.set_result(await self._read(*key))
        except Exception as error:
            answer.set_exception(error)

    async def _read(self, namespace: str, name: str) -> ClusterBrokers:
        body = await self._kube.cluster(namespace, name)
        if body is None:
            return ClusterBrokers(None, [])
        selector = selector_labels(ClusterSpec.from_resource(body))
        return ClusterBrokers(body, await self._kube.pods(namespace, selector))
