"""DescribeProducers (v0): each partition's producers as its leader's log keeps them
(``Log.active_producers``: id, epoch, last sequence and timestamp, the coordinator epoch
of its last marker, its open transaction's first offset or -1), what
``kafka-transactions describe-producers`` and ``find-hanging`` read. Asked of a broker
that does not lead the partition: NOT_LEADER_OR_FOLLOWER, as Kafka answers."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import DESCRIBE_PRODUCERS
from tierlog.storage.errors import TierlogError
from tierlog.storage.records import NO_PARTITION_LEADER_EPOCH

__all__ = ["describe_producers"]


async def describe_producers(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    topics = [
        {
            "name": topic.name,
            "partitions": [_one(broker, topic.name, index) for index in topic.partition_indexes],
        }
        for topic in body.topics
    ]
    return build(response_type(DESCRIBE_PRODUCERS, version), {"throttle_time": 0, "topics": topics})


def _one(broker: KafkaBroker, topic: str, index: int) -> dict[str, Any]:
    try:
        _tp, partition_log = broker.partitions.log(topic, index, NO_PARTITION_LEADER_EPOCH)
    except TierlogError as error:
        return {
            "partition_index": index,
            "error_code": error_code(error),
            "error_message": str(error),
            "active_producers": [],
        }
    return {
        "partition_index": index,
        "error_code": ErrorCode.none,
        "active_producers": [
            {
                "producer_id": producer.producer_id,
                "producer_epoch": producer.producer_epoch,
                "last_sequence": producer.last_sequence,
                "last_timestamp": producer.timestamp,
                "coordinator_epoch": producer.coordinator_epoch,
                "current_txn_start_offset": producer.current_txn_first_offset,
            }
            for producer in partition_log.active_producers()
        ],
    }
