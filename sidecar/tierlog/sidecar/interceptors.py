"""What the sidecar's server interceptors share: the call's name and rebuilding its handler.

gRPC's aio interceptors see a call before its handler runs and get back an
``RpcMethodHandler`` whose behaviour is one of four shapes (unary or streaming on
each side). An interceptor that needs to run code around the behaviour (time it,
hold a budget, refuse it) builds a handler of the same shape around a new behaviour:
``with_behavior``. Streaming behaviours are either async generators or coroutines
that write with ``context.write`` (the health service's ``Watch``): a wrapper keeps
the form it wraps (``inspect.isasyncgenfunction``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

__all__ = ["CallName", "Context", "call_name", "inner_behavior", "is_exempt", "with_behavior"]

Context = grpc.aio.ServicerContext[Any, Any]

# Called by Kubernetes probes and load balancers, which carry no credentials and
# must be answered even when the server is saturated.
_EXEMPT_SERVICES = frozenset({"grpc.health.v1.Health"})


@dataclass(frozen=True)
class CallName:
    service: str  # the short service name: "LogService", "Health"
    full_service: str  # with its package: "tierlog.v1.LogService"
    method: str  # "Produce"


def call_name(details: grpc.HandlerCallDetails) -> CallName:
    """``/tierlog.v1.LogService/Produce`` -> (LogService, tierlog.v1.LogService, Produce)."""
    full_service, _, method = details.method.lstrip("/").partition("/")
    return CallName(full_service.rpartition(".")[2], full_service, method)


def is_exempt(name: CallName) -> bool:
    return name.full_service in _EXEMPT_SERVICES


def with_behavior(
    handler: grpc.RpcMethodHandler[Any, Any],
    behavior: Callable[..., Any],
    *,
    request_deserializer: Callable[[bytes], Any] | None = None,
    response_serializer: Callable[[Any], bytes] | None = None,
) -> Any:
    """A handler of ``handler``'s shape that runs ``behavior``, with ``handler``'s
    (de)serializers unless others are given."""
    if handler.request_streaming and handler.response_streaming:
        make: Callable[..., Any] = grpc.stream_stream_rpc_method_handler
    elif handler.request_streaming:
        make = grpc.stream_unary_rpc_method_handler
    elif handler.response_streaming:
        make = grpc.unary_stream_rpc_method_handler
    else:
        make = grpc.unary_unary_rpc_method_handler
    return make(
        behavior,
        request_deserializer=request_deserializer or handler.request_deserializer,
        response_serializer=response_serializer or handler.response_serializer,
    )


def inner_behavior(handler: grpc.RpcMethodHandler[Any, Any]) -> Callable[..., Any]:
    for behavior in (
        handler.unary_unary,
        handler.unary_stream,
        handler.stream_unary,
        handler.stream_stream,
    ):
        if behavior is not None:
            return behavior
    raise ValueError("a method handler without a behaviour")
