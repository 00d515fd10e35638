"""A coordinator, found and followed: the calls of one group or one transactional id.

Kafka's clients find a key's coordinator with FindCoordinator (any broker answers), send
the key's calls there, and on NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a lost
connection forget it and find it again; COORDINATOR_LOAD_IN_PROGRESS (and the reasons a
coordinator adds, e.g. the transaction coordinator's CONCURRENT_TRANSACTIONS) are waited
out at the same coordinator. ``CoordinatorClient`` does so for each call, backing off
``retry.backoff.ms`` (doubling up to ``retry.backoff.max.ms``) until the call's timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TypeVar

import grpc

from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.api.v1 import group_service_pb2_grpc
from tierlog.client.cluster import Cluster
from tierlog.client.errors import RequestTimedOutError, TierlogError, reason_of
from tierlog.client.rpc import error_from_rpc

__all__ = ["CoordinatorClient"]

_T = TypeVar("_T")

# Reasons after which the coordinator is found again (it moved, has none, or is gone).
_FIND_AGAIN = frozenset({"NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "NETWORK_EXCEPTION"})
# Reasons waited out at the same coordinator.
_WAIT = frozenset({"COORDINATOR_LOAD_IN_PROGRESS", "REQUEST_TIMED_OUT"})


class CoordinatorClient:
    """The calls about one key (a group id, a transactional id), sent to its coordinator
    wherever it is. ``wait_reasons`` are more reasons to wait out."""

    def __init__(
        self,
        cluster: Cluster,
        key: str,
        key_type: pb.CoordinatorType.ValueType,
        *,
        timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        wait_reasons: Iterable[str] = (),
    ) -> None:
        self.cluster = cluster
        self.key = key
        self.key_type = key_type
        self.timeout_s = timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.retry_backoff_max_s = max(retry_backoff_max_ms, retry_backoff_ms) / 1000
        self.wait_reasons = _WAIT | frozenset(wait_reasons)
        self._coordinator: str | None = None

    def coordinator(self) -> str:
        """The coordinator's address (asked for once, then kept until it fails)."""
        if self._coordinator is None:
            request = pb.FindCoordinatorRequest(key=self.key, key_type=self.key_type)

            def ask(address: str) -> pb.FindCoordinatorResponse:
                stub = group_service_pb2_grpc.GroupServiceStub(self.cluster.channel(address))
                return stub.FindCoordinator(request, timeout=self.cluster.request_timeout_s)

            self._coordinator = self.cluster.any_broker(ask).address
        return self._coordinator

    def call(self, method: Callable[[grpc.Channel], _T], *, timeout_s: float | None = None) -> _T:
        """``method`` over a channel to the coordinator, retried as Kafka's clients retry
        (for ``timeout_s``, by default the client's)."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        backoff_s = self.retry_backoff_s
        while True:
            try:
                return method(self.cluster.channel(self.coordinator()))
            except grpc.RpcError as rpc_error:
                error = error_from_rpc(rpc_error)
            except TierlogError as raised:  # finding the coordinator failed
                error = raised
            reason = reason_of(error)
            if reason in _FIND_AGAIN:
                self._coordinator = None
            elif reason not in self.wait_reasons:
                raise error from None
            if time.monotonic() + backoff_s > deadline:
                raise RequestTimedOutError(
                    f"{self.key!r}: no answer in {timeout_s} s: {error}"
                ) from error
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, self.retry_backoff_max_s)
