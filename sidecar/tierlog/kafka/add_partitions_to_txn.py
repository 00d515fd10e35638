"""AddPartitionsToTxn (v0-v3, a client's): the partitions join the producer's transaction
at its coordinator, as the gRPC TransactionService's call does. As Kafka answers, a
partition unknown here is UNKNOWN_TOPIC_OR_PARTITION and the others of the request
OPERATION_NOT_ATTEMPTED; otherwise the coordinator's answer (NOT_COORDINATOR,
CONCURRENT_TRANSACTIONS, PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING...) is every
partition's. Before v2 a fenced producer is told INVALID_PRODUCER_EPOCH (KIP-588).

v4+ is not served: it batches many transactional ids for brokers verifying a produce
(KIP-890) and is sent broker to broker, never by a client; tierlog's brokers reach the
coordinator over gRPC.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code, fencing_error_code
from tierlog.kafka.versions import ADD_PARTITIONS_TO_TXN
from tierlog.storage.errors import TierlogError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["add_partitions_to_txn"]

_PRODUCER_FENCED_SINCE = 2


async def add_partitions_to_txn(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    tps = [
        TopicPartition(topic.name, partition)
        for topic in body.v3_and_below_topics
        for partition in topic.partitions
    ]
    codes = _unknown(broker, tps)
    if codes:
        for tp in tps:
            codes.setdefault(tp, ErrorCode.operation_not_attempted)
    else:
        code = ErrorCode.none
        try:
            await broker.coordinators.ensure_transaction_topic()
            await broker.transactions.add_partitions(
                body.v3_and_below_transactional_id,
                body.v3_and_below_producer_id,
                body.v3_and_below_producer_epoch,
                tps,
            )
        except TierlogError as error:
            code = fencing_error_code(error, version, _PRODUCER_FENCED_SINCE)
        codes = dict.fromkeys(tps, code)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, code in codes.items():
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "partition_error_code": code}
        )
    return build(
        response_type(ADD_PARTITIONS_TO_TXN, version),
        {
            "throttle_time": 0,
            "results_by_topic_v3_and_below": [
                {"name": topic, "results_by_partition": results}
                for topic, results in by_topic.items()
            ],
        },
    )


def _unknown(broker: KafkaBroker, tps: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    """The partitions this broker does not know, with why."""
    unknown = {}
    for tp in tps:
        try:
            broker.partitions.topics.check_partition(tp.topic, tp.partition)
        except TierlogError as error:
            unknown[tp] = error_code(error)
    return unknown
