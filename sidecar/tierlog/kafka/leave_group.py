"""LeaveGroup (classic groups): members leave at once instead of at their session's end,
through the group coordinator's ``leave_group``; the others rebalance. v1-v2 name one
member; v3+ a batch, each by member id or (static members) by instance id alone, each
answered on its own (KIP-345); v5 adds a reason (ignored here).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import LEAVE_GROUP
from tierlog.storage.errors import TierlogError

__all__ = ["leave_group"]

_BATCH_VERSION = 3


async def leave_group(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    schema = response_type(LEAVE_GROUP, version)
    if version < _BATCH_VERSION:
        leaving: list[tuple[str, str | None]] = [(body.member_id, None)]
    else:
        leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    try:
        outcomes = await broker.groups.leave_group(body.group_id, leaving)
    except TierlogError as error:
        return build(schema, {"throttle_time": 0, "error_code": error_code(error), "members": []})
    if version < _BATCH_VERSION:
        code = ErrorCode.none if outcomes[0] is None else error_code(outcomes[0])
        return build(schema, {"throttle_time": 0, "error_code": code})
    members = [
        {
            "member_id": member_id,
            "group_instance_id": instance_id,
            "error_code": ErrorCode.none if outcome is None else error_code(outcome),
        }
        for (member_id, instance_id), outcome in zip(leaving, outcomes, strict=True)
    ]
    return build(schema, {"throttle_time": 0, "error_code": ErrorCode.none, "members": members})
