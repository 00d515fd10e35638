"""Backpressure: bounds on the calls and produce bytes the sidecar holds at once.

gRPC reads a request whole before its handler runs, and a handler holds it until the
append is done. Without a bound, a flood of producers, or a disk that has slowed
down, lets requests pile up until the process runs out of memory. Two budgets, under
Kafka's broker names, and a third for what decoding their batches holds:

- ``queued.max.requests`` (500): calls in progress (streams and long polls included;
  health checks exempt). A call beyond it waits for a slot.
- ``queued.max.request.bytes`` (100 MiB; -1 unbounded): serialized produce requests
  admitted and not yet answered, a ``ProduceStream`` message from when the handler
  takes it until its answer. A request beyond it waits for room; one larger than the
  whole budget waits until nothing else is admitted.

- ``tierlog.validation.max.inflight.decompressed.bytes`` (256 MiB): what the
  validation of compressed produced batches holds decoded at once, over the whole
  broker (``tierlog.storage.records.inflight``); a validation beyond it waits in its
  thread, as long as the calls here do, then fails the same way.

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

__all__ = ["LIMIT_KEYS", "Budget", "LimitsConfig", "LimitsInterceptor"]

LIMIT_KEYS = frozenset(
    {"queued.max.requests", "queued.max.request.bytes", "tierlog.queued.max.wait.ms", BUDGET_KEY}
)


@dataclass(frozen=True)
class LimitsConfig:
    max_requests: int = 500
    max_request_bytes: int = 100 * 1024 * 1024  # -1: unbounded
    max_wait_ms: int = 30_000
    # Four batches decoded to the default bound (64 x max.message.bytes of 1 MiB).
    max_inflight_decompressed_bytes: int = 256 * 1024 * 1024

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LimitsConfig:
        try:
            config = cls(
                max_requests=int(props.get("queued.max.requests", cls.max_requests)),
                max_request_bytes=int(props.get("queued.max.request.bytes", cls.max_request_bytes)),
                max_wait_ms=int(props.get("tierlog.queued.max.wait.ms", cls.max_wait_ms)),
                max_inflight_decompressed_bytes=int(
                    props.get(BUDGET_KEY, cls.max_inflight_decompressed_bytes)
                ),
            )
        except ValueError as error:
            raise InvalidConfigError(f"invalid number in broker config: {error}") from None
        if config.max_requests < 1:
            raise InvalidConfigError("queued.max.requests must be at least 1")
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


class LimitsInterceptor(grpc.aio.ServerInterceptor):
    def __init__(
        self, config: LimitsConfig, on_bytes: Callable[[int, int], None] | None = None
    ) -> None:
        self.config = config
        self.calls = Budget(config.max_requests)
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
                await self._admit(self.calls, 1, context, "queued.max.requests")
                try:
                    async for response in inner(request, context):
                        yield response
                finally:
                    self.calls.release(1)

            return with_behavior(handler, stream)

        async def unary(request: Any, context: Context) -> Any:
            await self._admit(self.calls, 1, context, "queued.max.requests")
            try:
                if not (produce and self.produce_bytes):
                    return await inner(request, context)
                size = await self._admit(
                    self.produce_bytes, request.ByteSize(), context, "queued.max.request.bytes"
                )
                try:
                    return await inner(request, context)
                finally:
                    self.produce_bytes.release(size)
            finally:
                self.calls.release(1)

        return with_behavior(handler, unary)

    def _bounded_stream(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        """ProduceStream: each message holds its bytes from when the handler takes it
        until its answer goes out (answers come in order, one per message)."""

        async def stream(
            requests: AsyncIterator[log_service_pb2.ProduceStreamRequest], context: Context
        ) -> AsyncIterator[Any]:
            await self._admit(self.calls, 1, context, "queued.max.requests")
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

            try:
                async for response in inner(admitted(), context):
                    if budget is not None and held:
                        budget.release(held.popleft())
                    yield response
            finally:
                if budget is not None:
                    for size in held:
                        budget.release(size)
                self.calls.release(1)

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
