"""AlterConfigs (Kafka's older, whole-set alter): the overrides a resource names become
all of its overrides; those it leaves out go back to the broker's defaults. Through the
broker core's ``TopicChanges``, as the gRPC AlterConfigs."""

from __future__ import annotations

from typing import Any

from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.config_resources import TOPIC, alter_each
from tierlog.kafka.versions import ALTER_CONFIGS
from tierlog.storage.errors import InvalidConfigError

__all__ = ["alter_configs"]


async def alter_configs(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    responses = await alter_each(broker, request, "AlterConfigs", _changes)
    return build(
        response_type(ALTER_CONFIGS, version), {"throttle_time": 0, "responses": responses}
    )


def _changes(broker: KafkaBroker, resource: Any) -> tuple[dict[str, str], list[str]]:
    """The named overrides set, every other override of a topic removed."""
    wanted = {}
    for config in resource.configs:
        if config.value is None:
            raise InvalidConfigError(f"{config.name}: AlterConfigs needs a value for each")
        wanted[config.name] = config.value
    dropped: list[str] = []
    if resource.resource_type == TOPIC:
        current = broker.partitions.topics.get(resource.resource_name).configs
        dropped = [key for key in current if key not in wanted]
    return wanted, dropped
