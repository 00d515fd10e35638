"""ConsumerGroupHeartbeat (KIP-848): a member joins (epoch 0), heartbeats at its epoch,
or leaves (-1; -2 for a static member), through the group coordinator's ``heartbeat``,
the call the gRPC ConsumerGroupHeartbeat makes, so members of either door share one
group. Partitions are named by topic id on this wire, the ids Metadata reports; an owned
partition of a topic this broker does not know is left out of what the member owns.

The answer always carries the member's assignment (Kafka sends it when it changed; a
client applies an unchanged one as a no-op). From v1 the consumer makes its own member
id (KIP-1082): an empty one is INVALID_REQUEST; at v0 the coordinator makes one.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import InvalidRequestError
from tierlog.coordinator.assignment import Assignment, TopicIdPartition, to_records
from tierlog.coordinator.consumer_group import Heartbeat, TopicImage
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.request_client import current_client
from tierlog.kafka.versions import CONSUMER_GROUP_HEARTBEAT
from tierlog.storage.errors import TierlogError

__all__ = ["consumer_group_heartbeat", "kafka_assignment"]

_CLIENT_MEMBER_ID_VERSION = 1  # KIP-1082: the consumer makes its member id
_MS = datetime.timedelta(milliseconds=1)


async def consumer_group_heartbeat(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    schema = response_type(CONSUMER_GROUP_HEARTBEAT, version)
    try:
        if version >= _CLIENT_MEMBER_ID_VERSION and not body.member_id:
            raise InvalidRequestError(f"v{version}: the consumer makes its member id (KIP-1082)")
        await broker.coordinators.ensure_offsets_topic()
        topics = broker.groups.topic_image()
        answer = await broker.groups.heartbeat(body.group_id, _heartbeat(body, topics))
    except TierlogError as error:
        return build(
            schema,
            {
                "throttle_time": 0,
                "error_code": error_code(error),
                "error_message": str(error),
                "member_epoch": 0,
                "heartbeat_interval": 0,
            },
        )
    return build(
        schema,
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "member_id": answer.member_id,
            "member_epoch": answer.member_epoch,
            "heartbeat_interval": broker.groups.config.consumer_heartbeat_interval_ms,
            "assignment": {"topic_partitions": kafka_assignment(answer.assignment, topics)},
        },
    )


def kafka_assignment(assignment: Assignment, topics: TopicImage) -> list[dict[str, Any]]:
    """``[{"topic_id", "topic_name", "partitions"}]``, topics gone since left out."""
    names = {info.topic_id: name for name, info in topics.items()}
    return [
        {
            "topic_id": entry.topic_id,
            "topic_name": names[entry.topic_id],
            "partitions": entry.partitions,
        }
        for entry in to_records(assignment)
        if entry.topic_id in names
    ]


def _heartbeat(body: Any, topics: TopicImage) -> Heartbeat:
    client = current_client()
    names = body.subscribed_topic_names
    return Heartbeat(
        member_id=body.member_id,
        member_epoch=body.member_epoch,
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=int(body.rebalance_timeout / _MS),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor,
        owned=None if body.topic_partitions is None else _owned(body.topic_partitions, topics),
        client_id=client.client_id,
        client_host=client.host,
    )


def _owned(owned: Any, topics: TopicImage) -> Assignment:
    known = {info.topic_id for info in topics.values()}
    return frozenset(
        TopicIdPartition(entry.topic_id, int(partition))
        for entry in owned
        if entry.topic_id in known
        for partition in entry.partitions
    )
