"""ListTransactions (v0-v1): the transactional ids this broker coordinates (a client asks
every broker and merges), filtered by Kafka state name, by producer id and (v1) to those
open longer than a duration (``TransactionCoordinator.list_transactions``). A state
filter Kafka does not know is listed back in ``unknown_state_filters``, as Kafka does."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.coordinator.transaction_records import TransactionState
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import LIST_TRANSACTIONS
from tierlog.storage.errors import TierlogError

__all__ = ["list_transactions"]

_STATES = {state.kafka_name: state for state in TransactionState}


async def list_transactions(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    unknown = [name for name in body.state_filters if name not in _STATES]
    known = {_STATES[name] for name in body.state_filters if name in _STATES}
    answer: dict[str, Any] = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "unknown_state_filters": unknown,
        "transaction_states": [],
    }
    if unknown and not known:
        return build(response_type(LIST_TRANSACTIONS, version), answer)  # nothing can match
    try:
        listed = broker.transactions.list_transactions(
            known,
            {int(producer_id) for producer_id in body.producer_id_filters},
            int(getattr(body, "duration_filter", -1)),
        )
    except TierlogError as error:
        answer["error_code"] = error_code(error)
    else:
        answer["transaction_states"] = [
            {
                "transactional_id": transactional_id,
                "producer_id": value.producer_id,
                "transaction_state": value.state.kafka_name,
            }
            for transactional_id, value in sorted(listed, key=lambda item: item[0])
        ]
    return build(response_type(LIST_TRANSACTIONS, version), answer)
