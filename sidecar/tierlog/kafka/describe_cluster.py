"""DescribeCluster: the cluster id, the brokers Kafka clients can reach (with their
racks) and the controller. Brokers answer for the BROKERS endpoint type only: asking
a broker for the controllers is UNSUPPORTED_ENDPOINT_TYPE, as in Kafka. tierlog has no
ACLs: a client that asks for its authorized operations is told every operation on the
cluster, as a Kafka broker without an authorizer answers."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.versions import DESCRIBE_CLUSTER

__all__ = ["describe_cluster"]

_BROKERS_ENDPOINT = 1
# Kafka's AclOperation codes a cluster resource has: CREATE, ALTER, DESCRIBE,
# CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE.
_CLUSTER_OPERATIONS = sum(1 << operation for operation in (5, 7, 8, 9, 10, 11, 12))
_NOT_ASKED = -(2**31)


async def describe_cluster(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    answer: dict[str, Any] = {
        "throttle_time": 0,
        "endpoint_type": _BROKERS_ENDPOINT,
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "brokers": [],
        "cluster_authorized_operations": (
            _CLUSTER_OPERATIONS if body.include_cluster_authorized_operations else _NOT_ASKED
        ),
    }
    if getattr(body, "endpoint_type", _BROKERS_ENDPOINT) != _BROKERS_ENDPOINT:
        answer.update(
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message="a broker describes the brokers endpoint only",
        )
        return build(response_type(DESCRIBE_CLUSTER, version), answer)
    brokers = []
    for known in broker.partitions.ownership.brokers:
        address = broker.address_of(known.node_id)
        if address is not None:
            host, port = address
            brokers.append(
                {"broker_id": known.node_id, "host": host, "port": port, "rack": known.rack}
            )
    answer.update(error_code=ErrorCode.none, brokers=brokers)
    return build(response_type(DESCRIBE_CLUSTER, version), answer)
