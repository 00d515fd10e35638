"""The config resources the config APIs name: a topic, or a broker (this one).

A broker's configs are its topic defaults under their broker names, read-only: they
come from its properties file and change with a restart. A broker resource names this
broker's id; an empty name asks for the cluster-wide dynamic defaults, of which tierlog
has none (Kafka's answer without any: no configs); another id is INVALID_REQUEST, as a
Kafka broker answers a resource meant for another. Other resource types are
INVALID_REQUEST.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.api.errors import InvalidRequestError
from tierlog.broker.topic_configs import ConfigValue, broker_configs, topic_configs
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.errors import failure
from tierlog.storage.errors import InvalidConfigError

__all__ = ["BROKER", "CONFIG_TYPES", "TOPIC", "Changes", "alter_each", "configs_of"]

# What a request asks of one resource: the overrides to set and those to remove.
Changes = Callable[[KafkaBroker, Any], tuple[dict[str, str], list[str]]]

TOPIC = 2
BROKER = 4

# Kafka's DescribeConfigs config_type codes.
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7}


def _check_broker(broker: KafkaBroker, name: str) -> None:
    if name not in ("", str(broker.node_id)):
        raise InvalidRequestError(
            f"broker resource {name!r}: this is broker {broker.node_id}; ask that one"
        )


def configs_of(broker: KafkaBroker, resource_type: int, name: str) -> list[ConfigValue]:
    """The resource's configs (UNKNOWN_TOPIC_OR_PARTITION for a topic that does not
    exist, INVALID_TOPIC_EXCEPTION for a name that cannot be one)."""
    topics = broker.partitions.topics
    if resource_type == TOPIC:
        return topic_configs(topics.defaults, topics.get(name).configs)
    if resource_type == BROKER:
        _check_broker(broker, name)
        return broker_configs(topics.defaults) if name else []
    raise InvalidRequestError(f"resource type {resource_type}: only topics (2) and brokers (4)")


async def alter_each(
    broker: KafkaBroker, body: Any, api: str, changes: Changes
) -> list[dict[str, Any]]:
    """Each resource of an AlterConfigs-shaped request altered as ``changes`` reads it,
    answered on its own (one refused resource does not fail the others)."""
    responses = []
    for resource in body.resources:
        answer = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
        try:
            set_configs, delete_configs = changes(broker, resource)
            await _alter(
                broker,
                resource.resource_type,
                resource.resource_name,
                set_configs,
                delete_configs,
                validate_only=body.validate_only,
            )
        except Exception as error:
            code, message = failure(error, api)
            responses.append({**answer, "error_code": code, "error_message": message})
            continue
        responses.append({**answer, "error_code": ErrorCode.none, "error_message": None})
    return responses


async def _alter(
    broker: KafkaBroker,
    resource_type: int,
    name: str,
    set_configs: Mapping[str, str],
    delete_configs: Sequence[str],
    *,
    validate_only: bool,
) -> None:
    """Set and remove a topic's overrides through the broker core (INVALID_CONFIG for a
    bad value or key, and for a broker's configs, which are read-only here)."""
    if resource_type == BROKER:
        _check_broker(broker, name)
        raise InvalidConfigError(
            "a broker's configs are read-only here: set them in its properties and restart it"
        )
    if resource_type != TOPIC:
        raise InvalidRequestError(f"resource type {resource_type}: only topics (2) and brokers (4)")
    await broker.topic_changes.alter_configs(
        name, set_configs, delete_configs, validate_only=validate_only
    )
