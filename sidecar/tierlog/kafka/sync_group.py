"""SyncGroup (classic groups): the leader hands in every member's assignment, each member
gets its own, through the group coordinator's ``sync_group``. A long poll: a follower
waits for the leader's assignment, and everyone's answer waits until it is written to
``__consumer_offsets`` with the group's generation. v3 adds static members, v5 the
protocol type and name, which must be the group's (INCONSISTENT_GROUP_PROTOCOL).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import SYNC_GROUP
from tierlog.storage.errors import TierlogError

__all__ = ["sync_group"]


async def sync_group(broker: KafkaBroker, request: RequestPayload, version: int) -> ResponsePayload:
    body: Any = request
    schema = response_type(SYNC_GROUP, version)
    protocol = (getattr(body, "protocol_type", None), getattr(body, "protocol_name", None))
    try:
        await broker.coordinators.ensure_offsets_topic()
        assignment = await broker.groups.sync_group(
            body.group_id,
            body.member_id,
            body.generation_id,
            {item.member_id: item.assignment for item in body.assignments},
            group_instance_id=getattr(body, "group_instance_id", None),
            protocol=protocol,
        )
    except TierlogError as error:
        return build(
            schema,
            {
                "throttle_time": 0,
                "error_code": error_code(error),
                "protocol_type": None,
                "protocol_name": None,
                "assignment": b"",
            },
        )
    return build(
        schema,
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "protocol_type": protocol[0],
            "protocol_name": protocol[1],
            "assignment": assignment,
        },
    )
