"""DeleteRecords: each partition's log start moved on its leader by the broker core's
``delete_records`` (as the gRPC DeleteRecords); -1 deletes up to the high watermark.
Off the leader NOT_LEADER_OR_FOLLOWER, past the log end OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.broker.delete_records import delete_records as move_log_start
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import failure
from tierlog.kafka.versions import DELETE_RECORDS

__all__ = ["delete_records"]

_UNKNOWN = -1  # the low watermark of a partition that failed


async def delete_records(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    topics = []
    for topic in body.topics:
        partitions = []
        for partition in topic.partitions:
            index = partition.partition_index
            try:
                low_watermark = await move_log_start(
                    broker.partitions, topic.name, index, partition.offset
                )
            except Exception as error:
                code, _message = failure(error, "DeleteRecords")
                partitions.append(
                    {"partition_index": index, "low_watermark": _UNKNOWN, "error_code": code}
                )
                continue
            partitions.append(
                {
                    "partition_index": index,
                    "low_watermark": low_watermark,
                    "error_code": ErrorCode.none,
                }
            )
        topics.append({"name": topic.name, "partitions": partitions})
    return build(response_type(DELETE_RECORDS, version), {"throttle_time": 0, "topics": topics})
