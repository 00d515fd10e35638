"""TxnOffsetCommit (v0-v3): a transactional producer's offsets for a group, written by the
group coordinator (``GroupCoordinator.commit_transactional``, as the gRPC GroupService's
call) and applied when the producer's COMMIT marker reaches ``__consumer_offsets``. The
member id and generation (v3, KIP-447) are checked when given. One error code per
partition, as Kafka answers: a refusal of the whole call (NOT_COORDINATOR, the member's
check, a fenced producer) is every partition's."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.coordinator.coordinator import OffsetToCommit, TransactionalProducer
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import TXN_OFFSET_COMMIT
from tierlog.storage.errors import TierlogError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["txn_offset_commit"]


async def txn_offset_commit(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    offsets = [
        OffsetToCommit(
            TopicPartition(topic.name, partition.partition_index),
            partition.committed_offset,
            int(getattr(partition, "committed_leader_epoch", -1)),
            partition.committed_metadata or "",
        )
        for topic in body.topics
        for partition in topic.partitions
    ]
    producer = TransactionalProducer(body.transactional_id, body.producer_id, body.producer_epoch)
    try:
        await broker.coordinators.ensure_offsets_topic()
        outcomes = await broker.groups.commit_transactional(
            body.group_id,
            producer,
            offsets,
            member_id=getattr(body, "member_id", ""),
            generation_id=int(getattr(body, "generation_id", -1)),
            group_instance_id=getattr(body, "group_instance_id", None),
        )
        codes = {
            tp: ErrorCode.none if error is None else error_code(error) for tp, error in outcomes
        }
    except TierlogError as error:
        codes = dict.fromkeys((offset.tp for offset in offsets), error_code(error))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, code in codes.items():
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "error_code": code}
        )
    return build(
        response_type(TXN_OFFSET_COMMIT, version),
        {
            "throttle_time": 0,
            "topics": [
                {"name": topic, "partitions": partitions} for topic, partitions in by_topic.items()
            ],
        },
    )
