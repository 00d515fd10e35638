"""What the listener tells whoever watches it (the sidecar's Prometheus metrics).

A protocol, not the metrics themselves: ``tierlog.kafka`` sits below the server's
wiring and never imports it. Each call is made on the event loop, once per request
answered or connection ended, so an observer must not block.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from kio.schema.errors import ErrorCode

__all__ = ["UNOBSERVED", "Closed", "KafkaObserver", "Refused", "RequestDone"]


class Closed(Enum):
    """Why a connection the listener accepted ended."""

    CLIENT = "client"  # the client closed it, or the network lost it
    IDLE = "idle"  # connections.max.idle.ms
    INVALID_REQUEST = "invalid_request"  # bytes that cannot be answered
    AUTHENTICATION = "authentication"  # SASL refused or out of order
    SHUTDOWN = "shutdown"  # the broker stopping
    SERVER_ERROR = "server_error"  # a bug: logged with its traceback


class Refused(Enum):
    """Why a new connection was closed as soon as it was accepted."""

    MAX_CONNECTIONS_PER_IP = "max_connections_per_ip"
    TLS_HANDSHAKE = "tls_handshake"  # the client was not TLS, or not trusted, or gave up


@dataclass(frozen=True)
class RequestDone:
    api: str  # Kafka's name of the API: "Produce", "Fetch"...
    outcome: ErrorCode  # the answer's first error (NONE: all went well)
    errors: Iterable[ErrorCode]  # every code the answer carried that is not NONE
    seconds: float  # arrival of its last byte to the answer handed to the socket
    bytes_in: int  # the request's frame, size prefix included
    bytes_out: int  # the answer's frame (0: acks=0 produce, answered with nothing)


class KafkaObserver(Protocol):
    def kafka_request(self, done: RequestDone) -> None: ...

    def kafka_connection_opened(self) -> None: ...

    def kafka_connection_closed(self, why: Closed) -> None: ...

    def kafka_connection_refused(self, why: Refused) -> None: ...

    def kafka_accept_blocked(self, seconds: float) -> None:
        """The listener stopped accepting this long: ``max.connections`` were open."""


class _Unobserved:
    def kafka_request(self, done: RequestDone) -> None:
        pass

    def kafka_connection_opened(self) -> None:
        pass

    def kafka_connection_closed(self, why: Closed) -> None:
        pass

    def kafka_connection_refused(self, why: Refused) -> None:
        pass

    def kafka_accept_blocked(self, seconds: float) -> None:
        pass


UNOBSERVED: KafkaObserver = _Unobserved()
