"""CreateTopics through the broker core's ``TopicChanges`` (as the gRPC CreateTopics).

-1 partitions asks for Kafka's default ``num.partitions`` (1) and -1 replicas for the
broker's ``default.replication.factor``; 0 of either is refused as Kafka refuses it. A
manual replica assignment (both counts -1 with it, else INVALID_REQUEST) is taken with
replication, checked as Kafka checks it (INVALID_REPLICA_ASSIGNMENT); without
replication each partition is on its owner, so it is INVALID_REPLICA_ASSIGNMENT. A name
given twice in one request is INVALID_REQUEST for each. From v5 a created (or validated) topic comes
back with its partition count, replication factor and every config with its source;
from v7 with its topic id.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
)
from tierlog.broker.topic_configs import topic_configs
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import failure
from tierlog.kafka.versions import CREATE_TOPICS
from tierlog.storage.errors import InvalidConfigError

__all__ = ["create_topics"]

_DEFAULT = -1  # num_partitions or replication_factor: the broker's default
_NUM_PARTITIONS = 1  # Kafka's default num.partitions


async def create_topics(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    counts = Counter(topic.name for topic in body.topics)
    results = []
    for topic in body.topics:
        if counts[topic.name] > 1:
            results.append(
                _refused(topic.name, ErrorCode.invalid_request, "the topic is named twice")
            )
            continue
        try:
            results.append(await _create(broker, topic, body.validate_only))
        except Exception as error:
            results.append(_refused(topic.name, *failure(error, "CreateTopics")))
    return build(response_type(CREATE_TOPICS, version), {"throttle_time": 0, "topics": results})


async def _create(broker: KafkaBroker, topic: Any, validate_only: bool) -> dict[str, Any]:
    if topic.assignments:
        return await _create_placed(broker, topic, validate_only)
    if topic.num_partitions == 0 or topic.num_partitions < _DEFAULT:
        raise InvalidPartitionsError(
            f"{topic.num_partitions} partitions: a topic has at least 1 (-1: the default)"
        )
    if topic.replication_factor == 0 or topic.replication_factor < _DEFAULT:
        raise InvalidReplicationFactorError(
            f"replication factor {topic.replication_factor}: at least 1 (-1: the default)"
        )
    configs = _configs(topic)
    count = _NUM_PARTITIONS if topic.num_partitions == _DEFAULT else topic.num_partitions
    changes = broker.topic_changes
    await changes.create_topic(
        topic.name, count, topic.replication_factor, configs, validate_only=validate_only
    )
    factor = changes.replication_factor(topic.replication_factor)
    return _created(broker, topic.name, count, factor, configs)


async def _create_placed(broker: KafkaBroker, topic: Any, validate_only: bool) -> dict[str, Any]:
    """A topic with the client's own replica assignment (counts follow from it)."""
    if topic.num_partitions != _DEFAULT or topic.replication_factor != _DEFAULT:
        raise InvalidRequestError(
            "with a replica assignment, num_partitions and replication_factor are -1"
        )
    assignment = [
        (placed.partition_index, tuple(placed.broker_ids)) for placed in topic.assignments
    ]
    count, factor = len(assignment), len(assignment[0][1])
    configs = _configs(topic)
    await broker.topic_changes.create_topic(
        topic.name, count, factor, configs, validate_only=validate_only, assignment=assignment
    )
    return _created(broker, topic.name, count, factor, configs)


def _configs(topic: Any) -> dict[str, str]:
    configs = {}
    for config in topic.configs:
        if config.value is None:
            raise InvalidConfigError(f"{config.name}: a topic config needs a value")
        configs[config.name] = config.value
    return configs


def _created(
    broker: KafkaBroker, name: str, count: int, factor: int, configs: dict[str, str]
) -> dict[str, Any]:
    """v5+: the topic as made (or as it would be: validate_only), with every config."""
    return {
        "name": name,
        "topic_id": broker.partitions.manager.topic_id(name),
        "error_code": ErrorCode.none,
        "error_message": None,
        "num_partitions": count,
        "replication_factor": factor,
        "configs": [
            {
                "name": value.name,
                "value": value.value,
                "read_only": False,
                "config_source": value.source,
                "is_sensitive": False,
            }
            for value in topic_configs(broker.partitions.topics.defaults, configs)
        ],
    }


def _refused(name: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {
        "name": name,
        "topic_id": None,
        "error_code": code,
        "error_message": message,
        "configs": None,  # as Kafka answers a failed topic: no configs, counts -1
    }
