"""The consumer's asyncio face: ``AIOConsumer`` (as confluent-kafka's ``AIOConsumer``).

A ``Consumer`` is used by one thread at a time (Kafka's rule for its consumer), and its
``poll`` blocks; an aiohttp or FastAPI service must not block its event loop. So an
``AIOConsumer`` owns a ``Consumer`` and one worker thread, runs every call there in the
order awaited, and the loop only awaits the answer.

A task cancelled while its ``poll`` runs cannot stop the worker's ``poll``, which moves
the positions past the records it takes: the worker then seeks each partition back to
the first record nobody received, before any later call, so cancelling skips nothing
(nor can an auto-commit count those records as consumed).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from types import TracebackType
from typing import Self, TypeVar

from tierlog.client.config import ConsumerConfig
from tierlog.client.consumer import Consumer, ConsumerRecord, Rebalance
from tierlog.client.groups import OffsetAndMetadata
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["AIOConsumer"]

_T = TypeVar("_T")

# How long each poll of ``async for`` waits before it asks again (no record lost between).
_ITERATION_POLL_MS = 1000


class AIOConsumer:
    """``await``-able ``poll``, ``commit``, ``committed``, ``position`` and ``close`` over
    one ``Consumer``; ``async for record in consumer`` and ``async with``."""

    def __init__(self, config: ConsumerConfig | Mapping[str, object]) -> None:
        self._worker = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="tierlog-aio-consumer"
        )
        # Made on the worker, the only thread that will ever use it.
        self._consumer = self._worker.submit(Consumer, config).result()

    async def _call(self, fn: Callable[..., _T], *args: object) -> _T:
        return await asyncio.wrap_future(self._worker.submit(fn, *args))

    # --- assignment and positions -----------------------------------------------------

    async def assign(self, partitions: Iterable[TopicPartition]) -> None:
        await self._call(self._consumer.assign, list(partitions))

    async def subscribe(
        self,
        topics: str | Iterable[str] | re.Pattern[str],
        *,
        on_assign: Rebalance | None = None,
        on_revoke: Rebalance | None = None,
        on_lost: Rebalance | None = None,
    ) -> list[TopicPartition]:
        """``Consumer.subscribe``; the callbacks run on the worker thread, inside a
        ``poll``, as the consumer's run inside its ``poll``."""
        subscribe = functools.partial(
            self._consumer.subscribe,
            topics if isinstance(topics, str | re.Pattern) else list(topics),
            on_assign=on_assign,
            on_revoke=on_revoke,
            on_lost=on_lost,
        )
        return await self._call(subscribe)

    async def unsubscribe(self) -> None:
        await self._call(self._consumer.unsubscribe)

    async def assignment(self) -> list[TopicPartition]:
        return await self._call(self._consumer.assignment)

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        await self._call(self._consumer.seek, tp, offset)

    async def position(self, tp: TopicPartition) -> int:
        return await self._call(self._consumer.position, tp)

    # --- records ----------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 0) -> list[ConsumerRecord]:
        """Up to ``max.poll.records`` records, waiting at most ``timeout_ms`` for some, on
        the worker thread: the loop runs other tasks meanwhile."""
        polled = self._worker.submit(self._consumer.poll, timeout_ms)
        try:
            return await asyncio.wrap_future(polled)
        except asyncio.CancelledError:
            # Queued behind the poll, so it runs before any call awaited after this one.
            self._worker.submit(self._rewind, polled)
            raise

    def _rewind(self, polled: concurrent.futures.Future[list[ConsumerRecord]]) -> None:
        """On the worker: seek back to the first record of each partition that a
        cancelled ``poll`` took and nobody received."""
        if polled.cancelled() or polled.exception() is not None:
            return  # cancelled before it ran, or failed: it took nothing
        first: dict[TopicPartition, int] = {}
        for record in polled.result():
            first.setdefault(TopicPartition(record.topic, record.partition), record.offset)
        for tp, offset in first.items():
            self._consumer.seek(tp, offset)

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._records()

    async def _records(self) -> AsyncIterator[ConsumerRecord]:
        while True:
            for record in await self.poll(_ITERATION_POLL_MS):
                yield record

    # --- committed offsets ------------------------------------------------------------

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None
    ) -> None:
        """``Consumer.commit``: the group's offsets (by default the positions) stored
        once the coordinator's log committed them."""
        await self._call(self._consumer.commit, offsets)

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return await self._call(self._consumer.committed, list(partitions))

    def metrics(self) -> dict[str, float]:
        return self._consumer.metrics()  # a snapshot under the metrics' own lock

    # --- closing ----------------------------------------------------------------------

    async def close(self) -> None:
        """Close the consumer (committing first with auto-commit), then its worker."""
        try:
            await self._call(self._consumer.close)
        finally:
            self._worker.shutdown(wait=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
