"""DeleteTopics through the broker core's ``TopicChanges`` (as the gRPC DeleteTopics):
by name, or from v6 by topic id (UNKNOWN_TOPIC_ID for an id no topic has)."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import failure
from tierlog.kafka.versions import DELETE_TOPICS

__all__ = ["delete_topics"]


async def delete_topics(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    if hasattr(body, "topics"):  # v6: names or ids
        asked = [(topic.name, topic.topic_id) for topic in body.topics]
    else:
        asked = [(name, None) for name in body.topic_names]
    manager = broker.partitions.manager
    by_id = broker.topic_names_by_id()
    results = []
    for name, topic_id in asked:
        if name is None:
            name = by_id.get(topic_id) if topic_id is not None else None
            if name is None:
                results.append(_result(None, topic_id, ErrorCode.unknown_topic_id, "no such id"))
                continue
        try:
            await broker.topic_changes.delete_topic(name)
        except Exception as error:
            results.append(_result(name, topic_id, *failure(error, "DeleteTopics")))
            continue
        results.append(_result(name, manager.topic_id(name), ErrorCode.none, None))
    return build(response_type(DELETE_TOPICS, version), {"throttle_time": 0, "responses": results})


def _result(
    name: str | None, topic_id: uuid.UUID | None, code: ErrorCode, message: str | None
) -> dict[str, Any]:
    return {"name": name, "topic_id": topic_id, "error_code": code, "error_message": message}
