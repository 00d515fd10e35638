"""AddOffsetsToTxn (v0-v3): the group's ``__consumer_offsets`` partition joins the
producer's transaction at its coordinator, as the gRPC TransactionService's call does
(``__consumer_offsets`` created first: this may be the first call to name a group).
Before v2 a fenced producer is told INVALID_PRODUCER_EPOCH (KIP-588)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import fencing_error_code
from tierlog.kafka.versions import ADD_OFFSETS_TO_TXN
from tierlog.storage.errors import TierlogError

__all__ = ["add_offsets_to_txn"]

_PRODUCER_FENCED_SINCE = 2


async def add_offsets_to_txn(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    code = ErrorCode.none
    try:
        await broker.coordinators.ensure_transaction_topic()
        await broker.coordinators.ensure_offsets_topic()
        await broker.transactions.add_offsets(
            body.transactional_id, body.producer_id, body.producer_epoch, body.group_id
        )
    except TierlogError as error:
        code = fencing_error_code(error, version, _PRODUCER_FENCED_SINCE)
    return build(
        response_type(ADD_OFFSETS_TO_TXN, version), {"throttle_time": 0, "error_code": code}
    )
