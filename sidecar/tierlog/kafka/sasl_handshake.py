"""SaslHandshake and SaslAuthenticate past authentication: ILLEGAL_SASL_STATE.

On a SASL listener these requests are answered by the connection's authenticator
(``sasl``) before anything else is served; one that reaches the handlers comes on a
listener without SASL, or after authentication ended where sessions do not expire
(``connections.max.reauth.ms=0``; otherwise a SaslHandshake re-authenticates, KIP-368,
and goes to the authenticator too), and Kafka's broker answers it ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.versions import SASL_AUTHENTICATE, SASL_HANDSHAKE

__all__ = ["sasl_authenticate", "sasl_handshake"]


async def sasl_handshake(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    return build(
        response_type(SASL_HANDSHAKE, version),
        {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()},
    )


async def sasl_authenticate(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    return build(
        response_type(SASL_AUTHENTICATE, version),
        {"error_code": ErrorCode.illegal_sasl_state, "error_message": None, "auth_bytes": b""},
    )
