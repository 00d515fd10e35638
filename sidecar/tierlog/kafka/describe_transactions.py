"""DescribeTransactions (v0): each transactional id's state at its coordinator, as the
gRPC TransactionService's call reads it (``TransactionCoordinator.describe``): Kafka's
state name, producer id and epoch, timeout, start time and partitions; an id this broker
does not coordinate is NOT_COORDINATOR, an unknown one TRANSACTIONAL_ID_NOT_FOUND, each
in its own entry."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.coordinator.transaction_state import partitions_of
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import DESCRIBE_TRANSACTIONS
from tierlog.storage.errors import TierlogError

__all__ = ["describe_transactions"]


async def describe_transactions(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    states = []
    if body.transactional_ids:
        try:
            await broker.coordinators.ensure_transaction_topic()
        except TierlogError as error:
            states = [_refused(tid, error) for tid in body.transactional_ids]
        else:
            states = [_one(broker, tid) for tid in body.transactional_ids]
    return build(
        response_type(DESCRIBE_TRANSACTIONS, version),
        {"throttle_time": 0, "transaction_states": states},
    )


def _one(broker: KafkaBroker, transactional_id: str) -> dict[str, Any]:
    try:
        value = broker.transactions.describe(transactional_id)
    except TierlogError as error:
        return _refused(transactional_id, error)
    topics: dict[str, list[int]] = defaultdict(list)
    for tp in sorted(partitions_of(value)):
        topics[tp.topic].append(tp.partition)
    return {
        "error_code": ErrorCode.none,
        "transactional_id": transactional_id,
        "transaction_state": value.state.kafka_name,
        "transaction_timeout": value.transaction_timeout_ms,
        "transaction_start_time": value.start_timestamp_ms,
        "producer_id": value.producer_id,
        "producer_epoch": value.producer_epoch,
        "topics": [{"topic": topic, "partitions": parts} for topic, parts in topics.items()],
    }


def _refused(transactional_id: str, error: TierlogError) -> dict[str, Any]:
    return {
        "error_code": error_code(error),
        "transactional_id": transactional_id,
        "transaction_state": "",
        "transaction_timeout": 0,
        "transaction_start_time": 0,  # the schema's default, as Kafka leaves it
        "producer_id": -1,
        "producer_epoch": -1,
        "topics": [],
    }
