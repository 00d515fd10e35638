"""OffsetDelete: a group's offsets of some partitions removed (tombstones in
``__consumer_offsets``) through the group coordinator's ``delete_offsets``, the same
call as the gRPC OffsetDelete. A group this broker coordinates but does not know is
GROUP_ID_NOT_FOUND, and NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS likewise the
request's top-level error, as Kafka answers them."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.partition_errors import by_topic, outcome_codes
from tierlog.kafka.versions import OFFSET_DELETE
from tierlog.storage.errors import TierlogError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["offset_delete"]


async def offset_delete(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    asked = [
        TopicPartition(topic.name, partition.partition_index)
        for topic in body.topics
        for partition in topic.partitions
    ]
    schema = response_type(OFFSET_DELETE, version)
    try:
        await broker.coordinators.ensure_offsets_topic()
        outcomes = await broker.groups.delete_offsets(body.group_id, asked)
    except TierlogError as error:
        return build(schema, {"error_code": error_code(error), "throttle_time": 0, "topics": []})
    return build(
        schema,
        {
            "error_code": ErrorCode.none,
            "throttle_time": 0,
            "topics": by_topic(asked, outcome_codes(outcomes)),
        },
    )
