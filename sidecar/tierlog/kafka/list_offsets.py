"""ListOffsets: the earliest (-2), the latest a consumer can read (-1: the high
watermark, or the last stable offset under read_committed), the largest timestamp (-3),
the local log start (-4), the tier's end (-5), or the first offset at or after a time,
through the same ``broker.fetch.FetchReader.list_offset`` the gRPC ListOffsets uses.
From v10 a lookup that reads the remote tier's segments (a time, or the largest
timestamp, below the local log start) is REQUEST_TIMED_OUT past the request's
``timeout`` (KIP-1075); local lookups answer whatever it is, as Kafka's do.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import LIST_OFFSETS
from tierlog.storage.errors import TierlogError

__all__ = ["list_offsets"]

_READ_COMMITTED = 1


async def list_offsets(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    read_committed = int(getattr(body, "isolation_level", 0)) == _READ_COMMITTED
    # v10+; 0 (what kafka-python sends) leaves the lookup unbounded here, where Kafka
    # bounds it by remote.list.offsets.request.timeout.ms instead.
    timeout = getattr(body, "timeout", None)
    tier_timeout_s = timeout.total_seconds() if timeout and timeout.total_seconds() > 0 else None
    topics = []
    for topic in body.topics:
        partitions = []
        for partition in topic.partitions:
            partitions.append(
                await _one(broker, topic.name, partition, read_committed, tier_timeout_s)
            )
        topics.append({"name": topic.name, "partitions": partitions})
    return build(response_type(LIST_OFFSETS, version), {"throttle_time": 0, "topics": topics})


async def _one(
    broker: KafkaBroker,
    topic: str,
    partition: Any,
    read_committed: bool,
    tier_timeout_s: float | None,
) -> dict[str, Any]:
    index = partition.partition_index
    try:
        tp, partition_log = broker.partitions.log(
            topic, index, getattr(partition, "current_leader_epoch", -1)
        )
        listed = await broker.reader.list_offset(
            tp, partition_log, partition.timestamp, read_committed, tier_timeout_s
        )
    except TierlogError as error:
        return {"partition_index": index, "error_code": error_code(error)}
    return {
        "partition_index": index,
        "error_code": ErrorCode.none,
        "timestamp": listed.timestamp_ms,
        "offset": listed.offset,
        "leader_epoch": -1,  # the record's epoch is not looked up yet: -1 is "unknown"
    }
