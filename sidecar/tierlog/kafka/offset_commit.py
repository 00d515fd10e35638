"""OffsetCommit: a group's offsets stored through the group coordinator's ``commit``, the
same call as the gRPC OffsetCommit, so a commit through either door is read through
both; answered once ``__consumer_offsets`` holds it with acks=all.

A group-wide refusal (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_MEMBER_ID,
STALE_MEMBER_EPOCH, ...) is every partition's error code, as Kafka answers it. As
Kafka's coordinator does: a member of a KIP-848 group must commit at v9 or above
(UNSUPPORTED_VERSION below it), and from v9 a commit naming a generation or member
epoch of a group that does not exist is GROUP_ID_NOT_FOUND. v2-v4's
``retention_time`` is not honoured: every offset expires after
``offsets.retention.minutes``, as from v5 on.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import GroupIdNotFoundError
from tierlog.coordinator.coordinator import GroupCoordinator, OffsetToCommit
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.partition_errors import by_topic, outcome_codes
from tierlog.kafka.versions import OFFSET_COMMIT
from tierlog.storage.errors import TierlogError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["offset_commit"]

CONSUMER_PROTOCOL_VERSION = 9  # the first a KIP-848 member may commit with


async def offset_commit(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    offsets = [
        OffsetToCommit(
            TopicPartition(topic.name, partition.partition_index),
            partition.committed_offset,
            getattr(partition, "committed_leader_epoch", -1),
            partition.committed_metadata or "",
        )
        for topic in body.topics
        for partition in topic.partitions
    ]
    asked = [offset.tp for offset in offsets]
    try:
        await broker.coordinators.ensure_offsets_topic()
        refused = _refusal(broker.groups, body, version)
        if refused is not None:
            codes = dict.fromkeys(asked, refused)
        else:
            codes = outcome_codes(
                await broker.groups.commit(
                    body.group_id,
                    offsets,
                    member_id=body.member_id,
                    generation_id=body.generation_id_or_member_epoch,
                    group_instance_id=getattr(body, "group_instance_id", None),
                )
            )
    except TierlogError as error:
        codes = dict.fromkeys(asked, error_code(error))
    return build(
        response_type(OFFSET_COMMIT, version),
        {"throttle_time": 0, "topics": by_topic(asked, codes)},
    )


def _refusal(groups: GroupCoordinator, body: Any, version: int) -> ErrorCode | None:
    """What Kafka refuses by the request's version before looking at the offsets."""
    try:
        members = groups.consumer_group(body.group_id)
    except GroupIdNotFoundError:
        if version >= CONSUMER_PROTOCOL_VERSION and body.generation_id_or_member_epoch >= 0:
            return ErrorCode.group_id_not_found
        return None
    if (
        version < CONSUMER_PROTOCOL_VERSION
        and members is not None
        and body.member_id in members.subscriptions
    ):
        return ErrorCode.unsupported_version
    return None
