"""Who sent the request being handled: its header's client id and the peer's address,
which group membership records (Kafka's CLIENT-ID and HOST columns), and the principal
it authenticated as, whose fetch sessions it may use. The listener sets
them around each handler call; a handler that needs them asks ``current_client()``
instead of every handler taking them as arguments. Each connection is served by its own
task, so the value never leaks between connections."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["RequestClient", "current_client", "kafka_host", "serving"]


@dataclass(frozen=True)
class RequestClient:
    client_id: str
    host: str  # as Kafka shows it: "/" and the peer's IP address
    # Who the connection authenticated as, as Kafka names it: "User:NAME" for SASL,
    # "User:CN=...,O=..." for a TLS client certificate (``tls_principal``),
    # "User:ANONYMOUS" otherwise. Fetch sessions belong to it.
    principal: str = "User:ANONYMOUS"
    # Whether it proved it holds the broker's bearer token (SASL PLAIN or OAUTHBEARER):
    # the one principal that may alter users' SCRAM credentials.
    holds_broker_token: bool = False


_CURRENT: ContextVar[RequestClient] = ContextVar("kafka_request_client")


def current_client() -> RequestClient:
    return _CURRENT.get(RequestClient("", ""))


def serving(
    client_id: str | None,
    peer: object,
    principal: str | None = None,
    holds_broker_token: bool = False,
) -> None:
    """Name the client of the request this task handles next (``principal`` None: the
    connection did not authenticate)."""
    _CURRENT.set(
        RequestClient(
            client_id or "",
            kafka_host(peer),
            f"User:{principal or 'ANONYMOUS'}",
            holds_broker_token,
        )
    )


def kafka_host(peer: object) -> str:
    """Kafka's HOST ("/127.0.0.1") from asyncio's ``peername`` (a (host, port, ...)
    tuple for TCP)."""
    if isinstance(peer, tuple) and peer:
        return f"/{peer[0]}"
    return ""
