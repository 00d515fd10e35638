"""DeleteGroups: each group's offsets and membership records tombstoned, through the
group coordinator's ``delete_group`` (the gRPC DeleteGroups' call); a group with members
is NON_EMPTY_GROUP, one not known GROUP_ID_NOT_FOUND, each answered on its own.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import DELETE_GROUPS
from tierlog.storage.errors import TierlogError

__all__ = ["delete_groups"]


async def delete_groups(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    results = []
    for group_id in body.groups_names:
        code = ErrorCode.none
        try:
            await broker.coordinators.ensure_offsets_topic()
            await broker.groups.delete_group(group_id)
        except TierlogError as error:
            code = error_code(error)
        results.append({"group_id": group_id, "error_code": code})
    return build(response_type(DELETE_GROUPS, version), {"throttle_time": 0, "results": results})
