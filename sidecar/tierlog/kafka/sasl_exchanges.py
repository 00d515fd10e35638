"""One connection's SASL exchange, whatever its mechanism: messages in, answers out,
until it names the principal it authenticated.

PLAIN and OAUTHBEARER take one message and check the broker's bearer token
(``sasl_mechanisms``). SCRAM-SHA-256 and SCRAM-SHA-512 take two (``scram``) and check
the user's credential, read from the cluster's store at the client's first message (in
a thread: the store is a file or the API server), so a credential altered on any broker
counts at the next login.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tierlog.broker.scram_credentials import ScramCredential, ScramCredentials, ScramMechanism
from tierlog.kafka.sasl_mechanisms import TOKEN_MECHANISMS, SaslFailed
from tierlog.kafka.scram import (
    INVALID_CREDENTIALS,
    ClientFirst,
    client_final,
    client_first,
    server_final,
    server_first,
)
from tierlog.storage.errors import KafkaStorageError

__all__ = ["MECHANISMS", "SaslExchange", "ScramExchange", "TokenExchange"]

log = logging.getLogger(__name__)

# Every mechanism a listener may enable, by its SASL name.
MECHANISMS = (*TOKEN_MECHANISMS, *(m.mechanism_name for m in ScramMechanism))


class SaslExchange(Protocol):
    principal: str | None  # set once the exchange authenticated the client

    async def evaluate(self, message: bytes) -> bytes:
        """The answer to the client's next message; raises ``SaslFailed``."""
        ...


@dataclass
class TokenExchange:
    """PLAIN or OAUTHBEARER: one message that holds the broker's bearer token."""

    check: Callable[[bytes, str], str]
    token: str
    principal: str | None = None

    async def evaluate(self, message: bytes) -> bytes:
        self.principal = self.check(message, self.token)
        return b""


class ScramExchange:
    """A SCRAM exchange against the users' stored credentials."""

    def __init__(self, mechanism: ScramMechanism, credentials: ScramCredentials) -> None:
        self.mechanism = mechanism
        self.credentials = credentials
        self.principal: str | None = None
        # The client's first message, its user's credential, the server-first sent.
        self._first: tuple[ClientFirst, ScramCredential, str] | None = None

    async def evaluate(self, message: bytes) -> bytes:
        if self._first is None:
            first = client_first(message)
            try:
                credential = await asyncio.to_thread(
                    self.credentials.credential, first.user, self.mechanism
                )
            except KafkaStorageError as error:
                log.warning("kafka listener: SCRAM credentials cannot be read: %s", error)
                raise SaslFailed("SCRAM: the credentials store cannot be read now") from None
            if credential is None:
                raise SaslFailed(INVALID_CREDENTIALS)
            answer = server_first(first, credential, secrets.token_urlsafe(24))
            self._first = (first, credential, answer)
            return answer.encode()
        if self.principal is not None:
            raise SaslFailed("SCRAM: the exchange is over")
        first, credential, sent = self._first
        final = server_final(self.mechanism, credential, first, sent, client_final(message))
        self.principal = first.user
        return final.encode()
