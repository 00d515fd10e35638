"""DescribeClientQuotas (v0-v1): tierlog keeps no client quotas (KIP-546's user and
client-id byte and request rates), so every filter matches none and the answer is an
empty list, what a Kafka broker with no quotas configured answers. ``kafka-configs
--describe --entity-type users`` asks it beside the users' SCRAM credentials, and
fails without it."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.versions import DESCRIBE_CLIENT_QUOTAS

__all__ = ["describe_client_quotas"]


async def describe_client_quotas(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    return build(
        response_type(DESCRIBE_CLIENT_QUOTAS, version),
        {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "entries": ()},
    )
