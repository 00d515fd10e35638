"""DescribeConfigs: a topic's configs or a broker's (``config_resources``), each with
its source, its synonyms (when asked), its ConfigDef type and its documentation (when
asked), read from the broker core's ``topic_configs`` (the gRPC DescribeConfigs' too).
Null keys ask for every config, a list for those of its keys the resource has (an
empty list for none), as in Kafka."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.broker.topic_configs import ConfigValue
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.config_resources import BROKER, CONFIG_TYPES, configs_of
from tierlog.kafka.errors import failure
from tierlog.kafka.versions import DESCRIBE_CONFIGS

__all__ = ["describe_configs"]


async def describe_configs(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    synonyms = bool(getattr(body, "include_synonyms", False))
    documentation = bool(getattr(body, "include_documentation", False))
    results = []
    for resource in body.resources:
        answer = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
        try:
            values = configs_of(broker, resource.resource_type, resource.resource_name)
        except Exception as error:
            code, message = failure(error, "DescribeConfigs")
            results.append({**answer, "error_code": code, "error_message": message, "configs": []})
            continue
        keys = resource.configuration_keys
        read_only = resource.resource_type == BROKER
        results.append(
            {
                **answer,
                "error_code": ErrorCode.none,
                "error_message": None,
                "configs": [
                    _entry(value, read_only, synonyms, documentation)
                    for value in values
                    if keys is None or value.name in keys
                ],
            }
        )
    return build(response_type(DESCRIBE_CONFIGS, version), {"throttle_time": 0, "results": results})


def _entry(
    value: ConfigValue, read_only: bool, synonyms: bool, documentation: bool
) -> dict[str, Any]:
    return {
        "name": value.name,
        "value": value.value,
        "read_only": read_only,
        "config_source": value.source,
        "is_sensitive": False,
        "synonyms": [
            {"name": synonym.name, "value": synonym.value, "source": synonym.source}
            for synonym in (value.synonyms if synonyms else ())
        ],
        "config_type": CONFIG_TYPES[value.kafka_type],
        "documentation": value.documentation if documentation else None,
    }
