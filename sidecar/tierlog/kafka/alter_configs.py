"""AlterConfigs (Kafka's older, whole-set alter): the overrides a resource names become
all of its overrides; those it leaves out go back to the broker's defaults. Through the
broker core's ``TopicChanges``, as the gRPC AlterConfigs."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.config_resources import TOPIC, alter
from tierlog.kafka.errors import failure
from tierlog.kafka.versions import ALTER_CONFIGS
from tierlog.storage.errors import InvalidConfigError

__all__ = ["alter_configs"]


async def alter_configs(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    responses = []
    for resource in body.resources:
        answer = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
        try:
            await _alter(broker, resource, body.validate_only)
        except Exception as error:
            code, message = failure(error, "AlterConfigs")
            responses.append({**answer, "error_code": code, "error_message": message})
            continue
        responses.append({**answer, "error_code": ErrorCode.none, "error_message": None})
    return build(
        response_type(ALTER_CONFIGS, version), {"throttle_time": 0, "responses": responses}
    )


async def _alter(broker: KafkaBroker, resource: Any, validate_only: bool) -> None:
    wanted = {}
    for config in resource.configs:
        if config.value is None:
            raise InvalidConfigError(f"{config.name}: AlterConfigs needs a value for each")
        wanted[config.name] = config.value
    dropped: list[str] = []
    if resource.resource_type == TOPIC:
        current = broker.partitions.topics.get(resource.resource_name).configs
        dropped = [key for key in current if key not in wanted]
    await alter(
        broker,
        resource.resource_type,
        resource.resource_name,
        wanted,
        dropped,
        validate_only=validate_only,
    )
