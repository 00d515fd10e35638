"""CreatePartitions through the broker core's ``TopicChanges`` (as the gRPC
CreatePartitions): a count not above the topic's is INVALID_PARTITIONS; manual replica
assignments are INVALID_REQUEST (the broker places replicas); a topic named twice in
one request is INVALID_REQUEST for each."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import InvalidRequestError
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import failure
from tierlog.kafka.versions import CREATE_PARTITIONS

__all__ = ["create_partitions"]


async def create_partitions(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    counts = Counter(topic.name for topic in body.topics)
    results = []
    for topic in body.topics:
        try:
            if counts[topic.name] > 1:
                raise InvalidRequestError("the topic is named twice")
            if topic.assignments:
                raise InvalidRequestError(
                    "manual replica assignments are not taken: the broker places replicas"
                )
            await broker.topic_changes.add_partitions(
                topic.name, topic.count, validate_only=body.validate_only
            )
        except Exception as error:
            code, message = failure(error, "CreatePartitions")
            results.append({"name": topic.name, "error_code": code, "error_message": message})
            continue
        results.append({"name": topic.name, "error_code": ErrorCode.none, "error_message": None})
    return build(
        response_type(CREATE_PARTITIONS, version), {"throttle_time": 0, "results": results}
    )
