"""The network edge of errors: a raised ``TierlogError`` becomes a gRPC status, once.

Handlers raise the storage's typed errors (and the API's, ``tierlog.api.errors``) and
never build a status themselves: ``at_the_edge`` wraps each handler and turns the
error into the status code of its Kafka name, a ``google.rpc.ErrorInfo`` detail and
the ``tierlog-reason`` trailing metadata. Any other exception is a bug: it is logged
with its traceback and answered as ``UNKNOWN_SERVER_ERROR``, and the server goes on.
A stream the server stopped under (its request stream read once the server is
stopping) ends quietly: nobody is left to answer, and a clean stop is no bug.

Every error answered, as a status (``abort``) or in-band (``as_error``), is told to
the call's ``ERROR_LISTENER`` (a context variable the metrics interceptor sets per
call), so errors are counted by reason where they are mapped, once.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any, NoReturn, TypeVar, cast

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from tierlog.api.errors import (
    ERROR_DOMAIN,
    LEADER_KEY,
    REASON_KEY,
    NotLeaderOrFollowerError,
    status_code,
)
from tierlog.api.v1 import common_pb2
from tierlog.storage.errors import TierlogError

__all__ = ["ERROR_LISTENER", "abort", "as_error", "at_the_edge", "unexpected"]

log = logging.getLogger(__name__)

_Handler = TypeVar("_Handler", bound=Callable[..., Any])

# What grpc raises into a handler reading a call's stream once its server has stopped:
# the type is private to grpc's core, hence looked up by name.
_SERVER_STOPPED: type[Exception] = importlib.import_module(
    "grpc._cython.cygrpc"
)._ServerStoppedError

# Told the reason of every error the current call answers with (None: nobody listens).
ERROR_LISTENER: ContextVar[Callable[[str], None] | None] = ContextVar(
    "tierlog_error_listener", default=None
)


def _report(reason: str) -> None:
    listener = ERROR_LISTENER.get()
    if listener is not None:
        listener(reason)


class _UnknownServerError(TierlogError):
    """A bug: an exception nobody meant to raise."""


def unexpected(error: BaseException, what: str) -> TierlogError:
    """Log a bug with its traceback; the error to answer with instead."""
    log.error("unexpected error in %s", what, exc_info=error)
    return _UnknownServerError(f"{type(error).__name__} in {what}")


def as_error(error: TierlogError) -> common_pb2.Error:
    """The in-band form of an error, for calls that report items one by one."""
    _report(error.reason)
    return common_pb2.Error(reason=error.reason, message=str(error))


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: TierlogError) -> NoReturn:
    """End the call with the error's status, ErrorInfo detail and reason metadata."""
    _report(error.reason)
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN)
    trailing: list[tuple[str, str | bytes]] = [(REASON_KEY, error.reason)]
    if isinstance(error, NotLeaderOrFollowerError):
        info.metadata["leader_id"] = str(error.leader_id)
        info.metadata["leader_address"] = error.leader_address
        trailing.append((LEADER_KEY, f"{error.leader_id}@{error.leader_address}"))
    detail = any_pb2.Any()
    detail.Pack(info)
    code = status_code(error.reason)
    message = f"{error.reason}: {error}"
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    trailing.append(("grpc-status-details-bin", status.SerializeToString()))
    await context.abort(code, message, tuple(trailing))


def at_the_edge(handler: _Handler) -> _Handler:
    """Wrap a servicer method (coroutine or async generator) with the error mapping."""
    what = handler.__qualname__
    if inspect.isasyncgenfunction(handler):

        @functools.wraps(handler)
        async def streaming(
            self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            try:
                async for response in handler(self, request, context):
                    yield response
            except grpc.aio.AbortError:
                raise
            except _SERVER_STOPPED:
                log.debug("%s ended: the server stopped", what)
            except TierlogError as error:
                await abort(context, error)
            except Exception as error:  # the edge: log it, answer, go on
                await abort(context, unexpected(error, what))

        return cast(_Handler, streaming)

    @functools.wraps(handler)
    async def unary(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        call = cast(Callable[..., Awaitable[Any]], handler)
        try:
            return await call(self, request, context)
        except grpc.aio.AbortError:
            raise
        except TierlogError as error:
            await abort(context, error)
        except Exception as error:  # the edge: log it, answer, go on
            await abort(context, unexpected(error, what))

    return cast(_Handler, unary)
