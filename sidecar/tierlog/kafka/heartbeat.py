"""Heartbeat (classic groups): a member's session goes on, through the group
coordinator's ``classic_heartbeat``; REBALANCE_IN_PROGRESS tells it to join again,
ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID that it was left behind or removed. v3 adds
static members (FENCED_INSTANCE_ID when its instance came back as another member).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import HEARTBEAT
from tierlog.storage.errors import TierlogError

__all__ = ["heartbeat"]


async def heartbeat(broker: KafkaBroker, request: RequestPayload, version: int) -> ResponsePayload:
    body: Any = request
    code = ErrorCode.none
    try:
        broker.groups.classic_heartbeat(
            body.group_id,
            body.member_id,
            body.generation_id,
            getattr(body, "group_instance_id", None),
        )
    except TierlogError as error:
        code = error_code(error)
    return build(response_type(HEARTBEAT, version), {"throttle_time": 0, "error_code": code})
