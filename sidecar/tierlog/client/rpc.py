"""The client's gRPC edge: channels to sidecars, and failed calls turned into typed errors.

A failed call carries Kafka's error name twice (``tierlog.api.errors``): in the
``google.rpc.ErrorInfo`` of the status details and in the ``tierlog-reason`` trailing
metadata.  ``error_from_rpc`` reads the ErrorInfo first and falls back to the
metadata, then builds the error type of that name (``errors.error_for_reason``);
``NOT_LEADER_OR_FOLLOWER`` keeps the owner the broker named.  A call that failed
without a reason never reached a handler, or never heard its answer: the connection
failed (``NETWORK_EXCEPTION``, retriable as Kafka's lost connection is, whichever of
UNAVAILABLE, INTERNAL, UNKNOWN or CANCELLED gRPC said), the deadline passed
(``REQUEST_TIMED_OUT``), gRPC refused an oversized message (``MESSAGE_TOO_LARGE``), or
something in between refused the credentials (``SASL_AUTHENTICATION_FAILED``).  A TLS
handshake that fails (an untrusted server, a client certificate the server refuses)
never reaches the server: ``NETWORK_EXCEPTION``.
This is the one place the client maps statuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import grpc
from google.rpc import error_details_pb2, status_pb2

from tierlog.api.errors import (
    ERROR_DOMAIN,
    LEADER_KEY,
    REASON_KEY,
    NotLeaderOrFollowerError,
    SaslAuthenticationFailedError,
)
from tierlog.api.v1 import common_pb2
from tierlog.client.errors import (
    NetworkError,
    RequestTimedOutError,
    TierlogError,
    UnknownServerError,
    error_for_reason,
)
from tierlog.client.security import PLAINTEXT, ChannelSecurity
from tierlog.storage.errors import RecordTooLargeError

__all__ = [
    "CHANNEL_OPTIONS",
    "error_from_proto",
    "error_from_rpc",
    "open_aio_channel",
    "open_channel",
]

# Room for the largest fetch or produce a sidecar allows (a request is at most the
# broker's socket.request.max.bytes, 100 MiB unless raised).
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    # Back within a second of a sidecar's restart, not gRPC's default of up to 2 minutes.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # gRPC's name for how long one connection attempt may take, handshake included (its
    # default is 20 s; Kafka's socket.connection.setup.timeout.ms is 10 s). At 100 ms, as
    # it once was, a sidecar busy on a loaded machine missed it and the client failed
    # with "timed out before receiving SETTINGS frame"; 3 s still gives up on an address
    # that swallows connections (a deleted pod's) soon enough to resolve its name again.
    ("grpc.min_reconnect_backoff_ms", 3000),
    # A broker's name resolved again a second after a failure, not 30 s: on Kubernetes a
    # restarted broker's pod has a new IP behind the same name (a producer held its
    # records ~20 s for the old one when leadership went back to a restarted broker).
    ("grpc.dns_min_time_between_resolutions_ms", 1000),
)
_DETAILS_KEY = "grpc-status-details-bin"
# Statuses that, without a reason, the gRPC stack made up on this side of a broken
# connection: refused or reset (UNAVAILABLE), a write into a stream the dying
# connection had already ended ("Internal error from Core": INTERNAL), a peer gone
# mid-frame (UNKNOWN, INTERNAL), a call cut short (CANCELLED).  The sidecar answers
# every failure of its own with a reason, UNKNOWN_SERVER_ERROR included.
_TRANSPORT_FAILURES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
    }
)


def open_channel(address: str, security: ChannelSecurity = PLAINTEXT) -> grpc.Channel:
    """A channel to one sidecar, plaintext or TLS, with the token if there is one."""
    return security.open_channel(address, list(CHANNEL_OPTIONS))


def open_aio_channel(
    address: str,
    security: ChannelSecurity = PLAINTEXT,
    interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
) -> grpc.aio.Channel:
    """The same on ``grpc.aio``, bound to the running loop (the producer's streams)."""
    return security.open_aio_channel(address, list(CHANNEL_OPTIONS), interceptors)


def _reason_and_leader(call: grpc.Call) -> tuple[str | None, str | None]:
    trailing = dict(call.trailing_metadata() or ())
    reason: str | None = None
    leader: str | None = None
    details = trailing.get(_DETAILS_KEY)
    if isinstance(details, bytes):
        status = status_pb2.Status.FromString(details)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info) and info.domain == ERROR_DOMAIN:
                reason = info.reason
                if "leader_id" in info.metadata:
                    leader = f"{info.metadata['leader_id']}@{info.metadata['leader_address']}"
    fallback = trailing.get(REASON_KEY)
    if reason is None and isinstance(fallback, str):
        reason = fallback
    leader_text = trailing.get(LEADER_KEY)
    if leader is None and isinstance(leader_text, str):
        leader = leader_text
    return reason, leader


def error_from_rpc(error: grpc.RpcError) -> TierlogError:
    """The typed error a failed call stands for (see the module docstring)."""
    call = cast(grpc.Call, error)
    code = call.code()
    message = call.details() or str(code)
    reason, leader = _reason_and_leader(call)
    if reason == NotLeaderOrFollowerError.reason:
        leader_id, _, address = (leader or "-1@").partition("@")
        return NotLeaderOrFollowerError(message, leader_id=int(leader_id), leader_address=address)
    if reason is not None:
        return error_for_reason(reason, message)
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return RequestTimedOutError(message)
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:  # gRPC's own size check, before any handler
        return RecordTooLargeError(
            f"{message} (a request over the broker's socket.request.max.bytes, "
            "or an answer over this client's limit)"
        )
    if code is grpc.StatusCode.UNAUTHENTICATED:  # e.g. a proxy's refusal, without a reason
        return SaslAuthenticationFailedError(message)
    if code in _TRANSPORT_FAILURES:
        return NetworkError(f"{code.name}: {message}")
    return UnknownServerError(f"{code.name}: {message}")


def error_from_proto(error: common_pb2.Error) -> TierlogError:
    """The typed error of an in-band ``Error`` (per-item results, produce streams)."""
    if error.reason == NotLeaderOrFollowerError.reason:
        return NotLeaderOrFollowerError(error.message, leader_id=-1, leader_address="")
    return error_for_reason(error.reason, error.message)
