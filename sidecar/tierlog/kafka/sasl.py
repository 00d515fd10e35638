"""SASL authentication of one Kafka connection, before any other request is served.

As Kafka's ``SaslServerAuthenticator``: on a SASL listener a connection may send
ApiVersions, then must send SaslHandshake naming an enabled mechanism
(``sasl.enabled.mechanisms``), then the mechanism's messages; only then are its other
requests served. Handshake v1 carries those messages in SaslAuthenticate requests;
handshake v0 (clients older than Kafka 1.0) sends them bare, a size prefix and the
bytes, answered the same way. Any other request before the end, a second handshake, a
mechanism not enabled, or credentials that fail close the connection: the failures
after their answer (UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED with the
reason), the rest at once, as Kafka's broker does (its ILLEGAL_SASL_STATE is for SASL
requests that reach a connection past authentication: ``sasl_handshake``).

PLAIN and OAUTHBEARER check tierlog's bearer token in one message; SCRAM checks a
user's stored credential in two, each answered with the server's next message
(``sasl_exchanges``).

Sessions last ``connections.max.reauth.ms`` (KIP-368; 0, Kafka's default: for ever),
the lifetime SaslAuthenticate v1+ tells the client. Before it ends the client
re-authenticates on the same connection: SaslHandshake naming the same mechanism, then
SaslAuthenticate v1+, which must name the same principal (a failure closes the
connection, as a first one does). A connection whose session ended without that is
closed at its next request, as Kafka's broker closes it; a client then reconnects.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import ResponsePayload

from tierlog.broker.scram_credentials import ScramCredentials, ScramMechanism
from tierlog.kafka.codec import Frame, build, response_type
from tierlog.kafka.sasl_exchanges import SaslExchange, ScramExchange, TokenExchange
from tierlog.kafka.sasl_mechanisms import TOKEN_MECHANISMS, SaslFailed
from tierlog.kafka.versions import SASL_AUTHENTICATE, SASL_HANDSHAKE

__all__ = ["SaslAuthenticator", "SaslOutOfOrder", "SaslSettings"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SaslSettings:
    mechanisms: tuple[str, ...]  # sasl.enabled.mechanisms, each one of MECHANISMS
    token: str = field(repr=False)  # the broker's bearer token
    credentials: ScramCredentials  # the users' SCRAM credentials
    # The largest request read before authentication ends (Kafka's
    # ``sasl.server.max.receive.size``): an unauthenticated client cannot make the
    # broker read socket.request.max.bytes.
    max_receive_bytes: int = 524_288
    # How long an authentication lasts (Kafka's ``connections.max.reauth.ms``; 0: for ever).
    max_reauth_ms: int = 0


class SaslOutOfOrder(Exception):
    """A request the authentication's state does not allow: the connection is closed."""


class _State(Enum):
    HANDSHAKE = auto()  # ApiVersions or SaslHandshake expected
    AUTHENTICATE = auto()  # SaslAuthenticate expected (handshake v1), until the last
    BARE_TOKEN = auto()  # a bare mechanism message expected (handshake v0), likewise
    COMPLETE = auto()


class SaslAuthenticator:
    """One connection's authentication."""

    def __init__(self, settings: SaslSettings, peer: object):
        self.settings = settings
        self.peer = peer
        self.failure: str | None = None  # set: close once the answer is sent
        self._state = _State.HANDSHAKE
        self._mechanism = ""
        self._exchange: SaslExchange | None = None
        self.principal: str | None = None  # who it authenticated as, once complete
        self._expires_at: float | None = None  # time.monotonic() when the session ends
        self._reauthenticating = False

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def expects_bare_token(self) -> bool:
        return self._state is _State.BARE_TOKEN

    @property
    def holds_broker_token(self) -> bool:
        """Whether the client proved it holds the broker's bearer token (PLAIN or
        OAUTHBEARER), which lets it alter users' SCRAM credentials."""
        return self.complete and self._mechanism in TOKEN_MECHANISMS

    @property
    def expired(self) -> bool:
        """Whether the session's lifetime (``connections.max.reauth.ms``) is over."""
        expires_at = self._expires_at
        return self.complete and expires_at is not None and time.monotonic() >= expires_at

    def begins_reauthentication(self, api_key: int) -> bool:
        """Whether a request is a SaslHandshake re-authenticating (KIP-368) a connection
        whose session has a lifetime; without one, it is for the handlers to refuse."""
        return api_key == SASL_HANDSHAKE and self.complete and self.settings.max_reauth_ms > 0

    async def answer(self, frame: Frame) -> ResponsePayload:
        """The answer to a SASL request during authentication or re-authentication."""
        if self.begins_reauthentication(frame.api_key):
            return self._reauthenticate(frame.body, frame.api_version)
        if frame.api_key == SASL_HANDSHAKE and self._state is _State.HANDSHAKE:
            return self._handshake(frame.body, frame.api_version)
        if frame.api_key == SASL_AUTHENTICATE and self._state is _State.AUTHENTICATE:
            return await self._authenticate(frame.body, frame.api_version)
        raise SaslOutOfOrder(
            f"api key {frame.api_key} v{frame.api_version} before SASL authentication ended"
        )

    async def bare_token(self, message: bytes) -> bytes:
        """Handshake v0: the mechanism's answer to a bare message. Raises
        ``SaslFailed``: v0 has no way to say why but closing."""
        return await self._evaluate(message)

    def _handshake(self, body: Any, version: int) -> ResponsePayload:
        enabled = self.settings.mechanisms
        schema = response_type(SASL_HANDSHAKE, version)
        if body.mechanism not in enabled:
            self.failure = (
                f"SASL mechanism {body.mechanism!r} is not enabled ({', '.join(enabled)})"
            )
            return build(
                schema, {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled}
            )
        self._mechanism = body.mechanism
        self._exchange = self._exchange_for(body.mechanism)
        self._state = _State.AUTHENTICATE if version >= 1 else _State.BARE_TOKEN
        return build(schema, {"error_code": ErrorCode.none, "mechanisms": enabled})

    def _reauthenticate(self, body: Any, version: int) -> ResponsePayload:
        """A SaslHandshake on an authenticated connection: the same mechanism again, with
        SaslAuthenticate (handshake v1), as Kafka's broker requires."""
        schema = response_type(SASL_HANDSHAKE, version)
        if body.mechanism != self._mechanism or version < 1:
            self.failure = (
                f"re-authentication must use SaslHandshake v1+ and the mechanism "
                f"{self._mechanism!r}, not v{version} and {body.mechanism!r}"
            )
            return build(
                schema,
                {"error_code": ErrorCode.unsupported_sasl_mechanism,
                 "mechanisms": (self._mechanism,)},
            )  # fmt: skip
        self._exchange = self._exchange_for(self._mechanism)
        self._state = _State.AUTHENTICATE
        self._reauthenticating = True
        return build(schema, {"error_code": ErrorCode.none, "mechanisms": self.settings.mechanisms})

    def _exchange_for(self, mechanism: str) -> SaslExchange:
        check = TOKEN_MECHANISMS.get(mechanism)
        if check is not None:
            return TokenExchange(check, self.settings.token)
        return ScramExchange(ScramMechanism.named(mechanism), self.settings.credentials)

    async def _authenticate(self, body: Any, version: int) -> ResponsePayload:
        schema = response_type(SASL_AUTHENTICATE, version)
        try:
            reply = await self._evaluate(body.auth_bytes)
        except SaslFailed as failed:
            self.failure = f"authentication failed: {failed}"
            return build(
                schema,
                {
                    "error_code": ErrorCode.sasl_authentication_failed,
                    "error_message": str(failed),
                    "auth_bytes": b"",
                },
            )
        return build(
            schema,
            {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": reply,
             "session_lifetime": self.settings.max_reauth_ms if self.complete else 0},
        )  # fmt: skip

    async def _evaluate(self, message: bytes) -> bytes:
        """The exchange's answer to ``message``; the connection is authenticated once the
        exchange names its principal."""
        assert self._exchange is not None  # set by the handshake
        reply = await self._exchange.evaluate(message)
        principal = self._exchange.principal
        if principal is None:
            return reply
        if self._reauthenticating and principal != self.principal:
            raise SaslFailed(
                f"re-authentication must keep the principal {self.principal!r}, not {principal!r}"
            )
        self.principal = principal
        self._state = _State.COMPLETE
        self._reauthenticating = False
        if self.settings.max_reauth_ms > 0:
            self._expires_at = time.monotonic() + self.settings.max_reauth_ms / 1000
        log.debug("kafka listener: %s authenticated as %r (SASL/%s)", self.peer, principal,
                  self._mechanism)  # fmt: skip
        return reply
