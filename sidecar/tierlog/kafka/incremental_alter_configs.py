"""IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on a resource's configs,
through the broker core's ``TopicChanges`` (as the gRPC AlterConfigs).

APPEND and SUBTRACT are for LIST configs only (``cleanup.policy``), as in Kafka, and
work on the topic's current value (its override, else the broker's default): APPEND
adds the values it lacks, SUBTRACT removes the ones it has. A key named twice in one
resource is INVALID_REQUEST; an unknown key or a bad value INVALID_CONFIG.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import InvalidRequestError
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.config_resources import TOPIC, alter_each
from tierlog.kafka.versions import INCREMENTAL_ALTER_CONFIGS
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import InvalidConfigError

__all__ = ["incremental_alter_configs"]

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def incremental_alter_configs(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    responses = await alter_each(broker, request, "IncrementalAlterConfigs", _changes)
    return build(
        response_type(INCREMENTAL_ALTER_CONFIGS, version),
        {"throttle_time": 0, "responses": responses},
    )


def _changes(broker: KafkaBroker, resource: Any) -> tuple[dict[str, str], list[str]]:
    """The overrides to set and to remove that the resource's operations make."""
    named = Counter(config.name for config in resource.configs)
    twice = sorted(name for name, count in named.items() if count > 1)
    if twice:
        raise InvalidRequestError(f"{', '.join(twice)}: named more than once")
    set_configs: dict[str, str] = {}
    delete_configs: list[str] = []
    for config in resource.configs:
        operation = config.config_operation
        if operation == DELETE:
            delete_configs.append(config.name)
            continue
        if config.value is None:
            raise InvalidConfigError(f"{config.name}: a value is needed to change it")
        if operation == SET:
            set_configs[config.name] = config.value
        elif operation in (APPEND, SUBTRACT) and resource.resource_type == TOPIC:
            current = _current_list(broker, resource.resource_name, config.name)
            items = [item.strip() for item in config.value.split(",") if item.strip()]
            if operation == APPEND:
                current += [item for item in items if item not in current]
            else:
                current = [item for item in current if item not in items]
            set_configs[config.name] = ",".join(current)
        elif operation not in (APPEND, SUBTRACT):
            raise InvalidRequestError(f"{config.name}: unknown operation {operation}")
    return set_configs, delete_configs


def _current_list(broker: KafkaBroker, topic: str, key: str) -> list[str]:
    known = LogConfig.keys()
    if key not in known:
        raise InvalidConfigError(f"unknown topic config {key!r}")
    if LogConfig.kafka_type(key) != "LIST":
        raise InvalidConfigError(f"{key} is not a list: APPEND and SUBTRACT are for lists")
    value = broker.partitions.topics.log_config(topic).to_properties()[key]
    return [item for item in value.split(",") if item]
