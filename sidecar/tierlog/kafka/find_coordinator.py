"""FindCoordinator: the broker that coordinates a group (key type 0) or a transactional
id (1), through the same lookup as the gRPC FindCoordinator
(``replication.coordinator_lookup``: the leader of the key's partition of
``__consumer_offsets`` or ``__transaction_state``, the topic created on first use),
answered with that broker's Kafka address (``KafkaBroker.address_of``).

v1-v3 ask one key and answer at the top level; v4+ (KIP-699) ask a batch
(``coordinator_keys``) and answer one entry per key. A key whose coordinator is not
known (no leader, or a leader whose Kafka address this broker does not know) is
COORDINATOR_NOT_AVAILABLE, which Kafka's clients retry after a metadata refresh; the
answer then names node -1, host "" and port -1, as Kafka's ``Node.noNode``.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import CoordinatorNotAvailableError
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import FIND_COORDINATOR
from tierlog.replication.coordinator_lookup import coordinator_type
from tierlog.storage.errors import TierlogError

__all__ = ["find_coordinator"]

_BATCHED_VERSION = 4  # KIP-699: coordinator_keys, one answer per key


async def find_coordinator(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    schema = response_type(FIND_COORDINATOR, version)
    if version < _BATCHED_VERSION:
        answer = await _one(broker, int(body.key_type), body.key)
        return build(schema, {"throttle_time": 0, **answer})
    coordinators = [await _one(broker, int(body.key_type), key) for key in body.coordinator_keys]
    return build(schema, {"throttle_time": 0, "coordinators": coordinators})


async def _one(broker: KafkaBroker, key_type: int, key: str) -> dict[str, Any]:
    try:
        found = await broker.coordinators.find(coordinator_type(key_type), key)
        address = broker.address_of(found.node_id)
        if address is None:
            raise CoordinatorNotAvailableError(
                f"the Kafka address of broker {found.node_id}, {found.partition}'s leader, "
                "is not known here"
            )
    except TierlogError as error:
        return {
            "key": key,
            "error_code": error_code(error),
            "error_message": str(error),
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    host, port = address
    return {
        "key": key,
        "error_code": ErrorCode.none,
        "error_message": None,
        "node_id": found.node_id,
        "host": host,
        "port": port,
    }
