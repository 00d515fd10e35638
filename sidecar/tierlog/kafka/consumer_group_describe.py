"""ConsumerGroupDescribe (KIP-848): each asked group's state, epochs, assignor and
members with their subscriptions, current and target assignments (partitions by topic
id and name), from the group coordinator's ``consumer_group``. A group this broker does
not know, or one with committed offsets and no KIP-848 membership, is
GROUP_ID_NOT_FOUND, as Kafka answers a group that is not a consumer group (its admin
client then asks DescribeGroups); NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS
are the group's error. Authorized operations are not reported (no ACLs here)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import GroupIdNotFoundError
from tierlog.coordinator.assignment import EMPTY_ASSIGNMENT
from tierlog.coordinator.consumer_group import ConsumerGroup, TopicImage
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.consumer_group_heartbeat import kafka_assignment
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import CONSUMER_GROUP_DESCRIBE
from tierlog.storage.errors import TierlogError

__all__ = ["consumer_group_describe"]

_CONSUMER_MEMBER = 1  # member_type (v1): a KIP-848 member, not a classic one


async def consumer_group_describe(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    groups = [await _describe(broker, group_id) for group_id in body.group_ids]
    return build(
        response_type(CONSUMER_GROUP_DESCRIBE, version), {"throttle_time": 0, "groups": groups}
    )


async def _describe(broker: KafkaBroker, group_id: str) -> dict[str, Any]:
    try:
        await broker.coordinators.ensure_offsets_topic()
        group = broker.groups.consumer_group(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {group_id!r} is not a consumer group")
    except TierlogError as error:
        return {
            "error_code": error_code(error),
            "error_message": str(error),
            "group_id": group_id,
            "group_state": "",
            "group_epoch": -1,
            "assignment_epoch": -1,
            "assignor_name": "",
            "members": [],
        }
    topics = broker.groups.topic_image()
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "group_id": group_id,
        "group_state": group.state(),
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.target_epoch,
        "assignor_name": group.assignor(),
        "members": [_member(group, member_id, topics) for member_id in group.members],
    }


def _member(group: ConsumerGroup, member_id: str, topics: TopicImage) -> dict[str, Any]:
    subscription = group.subscriptions[member_id]
    current = group.current.get(member_id)
    return {
        "member_id": member_id,
        "instance_id": subscription.instance_id,
        "rack_id": subscription.rack_id,
        "member_epoch": current.member_epoch if current is not None else 0,
        "client_id": subscription.client_id,
        "client_host": subscription.client_host,
        "subscribed_topic_names": tuple(subscription.subscribed_topic_names),
        "subscribed_topic_regex": subscription.subscribed_topic_regex,
        "assignment": {
            "topic_partitions": kafka_assignment(
                current.assigned if current is not None else EMPTY_ASSIGNMENT, topics
            )
        },
        "target_assignment": {
            "topic_partitions": kafka_assignment(
                group.targets.get(member_id, EMPTY_ASSIGNMENT), topics
            )
        },
        "member_type": _CONSUMER_MEMBER,
    }
