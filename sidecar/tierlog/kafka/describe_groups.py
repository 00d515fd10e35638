"""DescribeGroups: each group's state, protocol and members, from the group coordinator
(``describe``, ``classic_group``, ``consumer_group``: what the gRPC DescribeGroups reads).

A classic group's members carry their metadata for the group's protocol and their last
assignment (what ``kafka-consumer-groups --describe`` decodes). A KIP-848 group is
described as well, protocol type "consumer", its members without metadata or assignment
bytes (ConsumerGroupDescribe has those). A group this coordinator does not know is
state "Dead" with no error, as Kafka answers up to v5; from v6 it is GROUP_ID_NOT_FOUND
with a message (KIP-1043). v4 adds members' instance ids.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import GroupIdNotFoundError
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import DESCRIBE_GROUPS
from tierlog.storage.errors import TierlogError

__all__ = ["describe_groups"]

_DEAD = "Dead"
_NOT_FOUND_SINCE = 6  # DescribeGroups v6 tells an unknown group as an error
_NO_OPERATIONS = -(2**31)  # authorized_operations not computed (Kafka's "omitted")


async def describe_groups(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    groups = []
    for group_id in body.groups:
        try:
            await broker.coordinators.ensure_offsets_topic()
            groups.append(_describe(broker, group_id))
        except GroupIdNotFoundError:
            groups.append(_unknown(group_id, version))
        except TierlogError as error:
            groups.append(_described(group_id, error_code(error), ""))
    return build(response_type(DESCRIBE_GROUPS, version), {"throttle_time": 0, "groups": groups})


def _describe(broker: KafkaBroker, group_id: str) -> dict[str, Any]:
    state = broker.groups.describe(group_id)
    classic = broker.groups.classic_group(group_id)
    if classic is not None:
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata(classic.protocol),
                "member_assignment": m.assignment,
            }
            for m in classic.members.values()
        ]
        protocol = (classic.protocol_type or "", classic.protocol or "")
        return _described(group_id, ErrorCode.none, state, protocol, members)
    consumers = broker.groups.consumer_group(group_id)
    if consumers is None:  # offsets only
        return _described(group_id, ErrorCode.none, state)
    members = [
        {
            "member_id": member_id,
            "group_instance_id": value.instance_id,
            "client_id": value.client_id,
            "client_host": value.client_host,
            "member_metadata": b"",
            "member_assignment": b"",
        }
        for member_id, value in sorted(consumers.subscriptions.items())
    ]
    return _described(group_id, ErrorCode.none, state, ("consumer", ""), members)


def _unknown(group_id: str, version: int) -> dict[str, Any]:
    if version < _NOT_FOUND_SINCE:
        return _described(group_id, ErrorCode.none, _DEAD)
    unknown = _described(group_id, ErrorCode.group_id_not_found, _DEAD)
    unknown["error_message"] = f"Group {group_id} not found."
    return unknown


def _described(
    group_id: str,
    code: ErrorCode,
    state: str,
    protocol: tuple[str, str] = ("", ""),
    members: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": None,
        "group_id": group_id,
        "group_state": state,
        "protocol_type": protocol[0],
        "protocol_data": protocol[1],
        "members": members or [],
        "authorized_operations": _NO_OPERATIONS,
    }
