"""Backpressure: bounds on the calls and produce bytes the sidecar holds at once.

gRPC reads a request whole before its handler runs, and a handler holds it until the
append is done. Without a bound, a flood of producers, or a disk that has slowed
down, lets requests pile up until the process runs out of memory. Two budgets, under
Kafka's broker names, and a third for what decoding their batches holds:

- ``queued.max.requests`` (500): unary calls in progress (long polls included; health
  checks exempt). A call beyond it waits for a slot.
- ``queued.max.request.bytes`` (100 MiB; -1 unbounded): serialized produce requests
  admitted and not yet answered, a ``ProduceStream`` message from when the handler
  takes it until its answer. A request beyond it waits for room; one larger than the
  whole budget waits until nothing else is admitted.
- ``tierlog.validation.max.inflight.decompressed.bytes`` (256 MiB): what the
  validation of compressed produced batches holds decoded at once, over the whole
  broker (``tierlog.storage.records.inflight``); a validation beyond it waits in its
  thread, as long as the calls here do, then fails the same way.

Streams (Subscribe, FetchSession, ProduceStream, ReplicaFetch) live as long as their
client, so they are not requests in a queue: counted against ``queued.max.requests``,
500 of them (one consumer of 500 partitions, or streams a client abandoned) left no
slot for anybody's produce. A stream is admitted once, against ``tierlog.max.streams``
(10,000); its messages are bounded by the stream itself (credits, pipelining) and,
for produce, by the byte budget.

One client must not take every slot either. Kafka serves a connection's requests one
at a time and caps connections per address (``max.connections.per.ip``); a gRPC client
multiplexes all its calls on one connection, so the fair share here is per connection
(the peer's address and port): ``tierlog.queued.max.requests.per.connection`` (100)
unary calls and ``tierlog.max.streams.per.connection`` (1,000) streams. A call beyond
its connection's share waits (and is refused) as one beyond the broker's, without
holding a slot of the broker's meanwhile.

A call waits for at most its deadline, and at most ``tierlog.queued.max.wait.ms``
(30 s), then fails with ``RESOURCE_EXHAUSTED`` and the reason
``THROTTLING_QUOTA_EXCEEDED``: the producer backs off and retries. Waiting is first
come, first served, and the waiters are bounded too: when what already waits fills
a second budget, a newcomer is refused at once, so memory held by requests is at
most about twice each budget, however many arrive. Deadlines are honoured beyond
the wait: gRPC cancels a call whose deadline passes, and its budget is freed.

What no budget here sees: gRPC reads a request before any interceptor learns its
size, so requests being read at once are bounded only one by one, by
``socket.request.max.bytes`` (the server's receive limit). Small requests make that
moment negligible; many large ones at once (tens of MiB each) are memory until they
reach the budget and are refused or wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from tierlog.api.errors import ThrottlingQuotaExceededError
from tierlog.api.v1 import log_service_pb2
from tierlog.sidecar.interceptors import (
    Context,
    call_name,
    inner_behavior,
    is_exempt,
    with_behavior,
)
from tierlog.sidecar.status import abort
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.records.inflight import BUDGET_KEY, DecompressedBytesBudget

__all__ = ["LIMIT_KEYS", "Budget", "ConnectionShares", "LimitsConfig", "LimitsInterceptor"]

_KEYS = {
    "max_requests": "queued.max.requests",
    "max_request_bytes": "queued.max.request.bytes",
    "max_wait_ms": "tierlog.queued.max.wait.ms",
    "max_requests_per_connection": "tierlog.queued.max.requests.per.connection",
    "max_streams": "tierlog.max.streams",
    "max_streams_per_connection": "tierlog.max.streams.per.connection",
    "max_inflight_decompressed_bytes": BUDGET_KEY,
}
LIMIT_KEYS = frozenset(_KEYS.values())


@dataclass(frozen=True)
class LimitsConfig:
    max_requests: int = 500
    max_request_bytes: int = 100 * 1024 * 1024  # -1: unbounded
    max_wait_ms: int = 30_000
    max_requests_per_connection: int = 100
    max_streams: int = 10_000
    max_streams_per_connection: int = 1_000
    # Four batches decoded to the default bound (64 x max.message.bytes of 1 MiB).
    max_inflight_decompressed_bytes: int = 256 * 1024 * 1024

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LimitsConfig:
        try:
            config = cls(
                **{
                    field: int(props[key])
                    for field, key in _KEYS.items()
                    if key in props  # else the default
                }
            )
        except ValueError as error:
            raise InvalidConfigError(f"invalid number in broker config: {error}") from None
        for field in (
            "max_requests",
            "max_requests_per_connection",
            "max_streams",
            "max_streams_per_connection",
        ):
            if getattr(config, field) < 1:
                raise InvalidConfigError(f"{_KEYS[field]} must be at least 1")
        if config.max_request_bytes == 0 or config.max_request_bytes < -1:
            raise InvalidConfigError("queued.max.request.bytes must be positive, or -1")
        if config.max_wait_ms < 0:
            raise InvalidConfigError("tierlog.queued.max.wait.ms cannot be negative")
        if config.max_inflight_decompressed_bytes < 4 * 1024 * 1024:
            raise InvalidConfigError(f"{BUDGET_KEY} must be at least 4 MiB (4194304)")
        return config

    def decompression_budget(self) -> DecompressedBytesBudget:
        """The broker's budget for validating compressed batches."""
        return DecompressedBytesBudget(self.max_inflight_decompressed_bytes, self.max_wait_ms)


class Budget:
    """``capacity`` units (calls, bytes) handed out first come, first served, on one loop."""

    def __init__(self, capacity: int, on_change: Callable[[int, int], None] | None = None):
        self.capacity = capacity
        self.used = 0
        self.waiting = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._on_change = on_change

    async def acquire(self, amount: int, timeout_s: float) -> int | None:
        """The units granted (``amount``, or the whole budget when it is larger), or None
        when none came within ``timeout_s`` or the waiting line is full."""
        amount = min(amount, self.capacity)
        if not self._waiters and self.used + amount <= self.capacity:
            self._take(amount)
            return amount
        if timeout_s <= 0 or self.waiting + amount > self.capacity:
            return None
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (amount, granted)
        self._waiters.append(entry)
        self.waiting += amount
        self._changed()
        try:
            async with asyncio.timeout(timeout_s):
                await granted
        except (TimeoutError, asyncio.CancelledError) as stopped:
            if granted.done() and not granted.cancelled():  # granted as the wait ended
                if isinstance(stopped, TimeoutError):
                    return amount
                self.release(amount)
                raise
            if entry in self._waiters:  # else _grant already dropped it
                self._waiters.remove(entry)
                self.waiting -= amount
            self._grant()  # the head of the line may have changed
            self._changed()
            if isinstance(stopped, asyncio.CancelledError):
                raise
            return None
        return amount

    def release(self, amount: int) -> None:
        self.used -= amount
        self._grant()
        self._changed()

    def _take(self, amount: int) -> None:
        self.used += amount
        self._changed()

    def _grant(self) -> None:
        while self._waiters:
            amount, granted = self._waiters[0]
            if not granted.done() and self.used + amount > self.capacity:
                return
            self._waiters.popleft()
            self.waiting -= amount
            if granted.done():  # gave up (timed out, cancelled), not yet out of the line
                continue
            self.used += amount
            granted.set_result(None)

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.used, self.waiting)


class ConnectionShares:
    """A budget of ``capacity`` for each connection (gRPC's peer string), made at its
    first call and dropped once nothing holds or waits for it."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._budgets: dict[str, Budget] = {}

    def of(self, peer: str) -> Budget:
        budget = self._budgets.get(peer)
        if budget is None:
            budget = self._budgets[peer] = Budget(self.capacity)
        return budget

    def forget_if_idle(self, peer: str) -> None:
        budget = self._budgets.get(peer)
        if budget is not None and not budget.used and not budget.waiting:
            del self._budgets[peer]


@dataclass(frozen=True)
class _Slots:
    """The broker's budget of a kind of call, each connection's share, and their names."""

    broker: Budget
    shares: ConnectionShares
    setting: str
    share_setting: str


class LimitsInterceptor(grpc.aio.ServerInterceptor):
    def __init__(
        self, config: LimitsConfig, on_bytes: Callable[[int, int], None] | None = None
    ) -> None:
        self.config = config
        self.calls = _Slots(
            Budget(config.max_requests),
            ConnectionShares(config.max_requests_per_connection),
            "queued.max.requests",
            "tierlog.queued.max.requests.per.connection",
        )
        self.streams = _Slots(
            Budget(config.max_streams),
            ConnectionShares(config.max_streams_per_connection),
            "tierlog.max.streams",
            "tierlog.max.streams.per.connection",
        )
        unbounded = config.max_request_bytes < 0
        self.produce_bytes = None if unbounded else Budget(config.max_request_bytes, on_bytes)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        name = call_name(handler_call_details)
        if handler is None or is_exempt(name):
            return handler
        inner = inner_behavior(handler)
        if handler.response_streaming and not inspect.isasyncgenfunction(inner):
            return handler  # writes with context.write: only the exempt health service does
        produce = name.service == "LogService" and name.method in ("Produce", "ProduceStream")
        if handler.response_streaming:
            if produce:
                return with_behavior(handler, self._bounded_stream(inner))

            async def stream(request: Any, context: Context) -> AsyncIterator[Any]:
                async with self._slot(self.streams, context):
                    async for response in inner(request, context):
                        yield response

            return with_behavior(handler, stream)

        async def unary(request: Any, context: Context) -> Any:
            async with self._slot(self.calls, context):
                if not (produce and self.produce_bytes):
                    return await inner(request, context)
                size = await self._admit(
                    self.produce_bytes, request.ByteSize(), context, "queued.max.request.bytes"
                )
                try:
                    return await inner(request, context)
                finally:
                    self.produce_bytes.release(size)

        return with_behavior(handler, unary)

    @contextlib.asynccontextmanager
    async def _slot(self, slots: _Slots, context: Context) -> AsyncIterator[None]:
        """Hold one of the connection's share, then one of the broker's, for the call."""
        peer = context.peer()
        share = slots.shares.of(peer)
        try:
            await self._admit(share, 1, context, slots.share_setting)
            try:
                await self._admit(slots.broker, 1, context, slots.setting)
                try:
                    yield
                finally:
                    slots.broker.release(1)
            finally:
                share.release(1)
        finally:
            slots.shares.forget_if_idle(peer)

    def _bounded_stream(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        """ProduceStream: each message holds its bytes from when the handler takes it
        until its answer goes out (answers come in order, one per message)."""

        async def stream(
            requests: AsyncIterator[log_service_pb2.ProduceStreamRequest], context: Context
        ) -> AsyncIterator[Any]:
            held: deque[int] = deque()
            budget = self.produce_bytes

            async def admitted() -> AsyncIterator[log_service_pb2.ProduceStreamRequest]:
                async for request in requests:
                    if budget is not None:
                        held.append(
                            await self._admit(
                                budget, request.ByteSize(), context, "queued.max.request.bytes"
                            )
                        )
                    yield request

            async with self._slot(self.streams, context):
                try:
                    async for response in inner(admitted(), context):
                        if budget is not None and held:
                            budget.release(held.popleft())
                        yield response
                finally:
                    if budget is not None:
                        for size in held:
                            budget.release(size)

        return stream

    async def _admit(self, budget: Budget, amount: int, context: Context, setting: str) -> int:
        remaining_s = context.time_remaining()
        wait_s = self.config.max_wait_ms / 1000
        if remaining_s is not None:
            wait_s = min(wait_s, remaining_s)
        granted = await budget.acquire(amount, wait_s)
        if granted is None:
            await abort(
                context,
                ThrottlingQuotaExceededError(
                    f"the broker is at its {setting} limit ({budget.capacity}); retry later"
                ),
            )
        return granted
