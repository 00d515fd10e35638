"""ListGroups: the groups this broker coordinates, from the group coordinator's
``list_groups`` (the gRPC ListGroups' call), each with its protocol type; v4 filters by
state, v5 by type ("classic", "consumer") and answers each group's type. Filters match
regardless of case, as Kafka's do.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import LIST_GROUPS
from tierlog.storage.errors import TierlogError

__all__ = ["list_groups"]


async def list_groups(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    schema = response_type(LIST_GROUPS, version)
    states = {state.lower() for state in getattr(body, "states_filter", ())}
    types = {group_type.lower() for group_type in getattr(body, "types_filter", ())}
    try:
        await broker.coordinators.ensure_offsets_topic()
        listed = broker.groups.list_groups()
    except TierlogError as error:
        return build(schema, {"throttle_time": 0, "error_code": error_code(error), "groups": []})
    groups = [
        {
            "group_id": group.group_id,
            "protocol_type": group.protocol_type,
            "group_state": group.state,
            "group_type": group.group_type,
        }
        for group in listed
        if (not states or group.state.lower() in states)
        and (not types or group.group_type in types)
    ]
    return build(schema, {"throttle_time": 0, "error_code": ErrorCode.none, "groups": groups})
