"""OffsetForLeaderEpoch for consumers (KIP-320): where a leader epoch ended in the
leader's log, from its leader-epoch checkpoint (``Log.leader_epoch_cache``), so a
consumer that followed a failover finds whether its position is still on the log and
truncates to the epoch's end when it is not. The partition's current epoch is checked as
every request's is (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH). Followers use gRPC's
ReplicaFetch, not this.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import OFFSET_FOR_LEADER_EPOCH
from tierlog.storage.errors import TierlogError

__all__ = ["offset_for_leader_epoch"]


async def offset_for_leader_epoch(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    topics = [
        {
            "topic": topic.topic,
            "partitions": [_one(broker, topic.topic, partition) for partition in topic.partitions],
        }
        for topic in body.topics
    ]
    return build(
        response_type(OFFSET_FOR_LEADER_EPOCH, version), {"throttle_time": 0, "topics": topics}
    )


def _one(broker: KafkaBroker, topic: str, partition: Any) -> dict[str, Any]:
    try:
        _tp, partition_log = broker.partitions.log(
            topic, partition.partition, partition.current_leader_epoch
        )
    except TierlogError as error:
        return {"partition": partition.partition, "error_code": error_code(error)}
    end = partition_log.leader_epoch_cache.end_offset_for(
        partition.leader_epoch, partition_log.log_end_offset
    )
    return {
        "partition": partition.partition,
        "error_code": ErrorCode.none,
        "leader_epoch": end.epoch,
        "end_offset": end.end_offset,
    }
