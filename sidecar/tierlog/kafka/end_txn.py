"""EndTxn (v0-v3): commit or abort the producer's transaction at its coordinator, as the
gRPC TransactionService's call does: answered once every partition has its marker (Kafka
answers once the outcome is prepared), so a producer whose commit returned finds its
records readable under read_committed. Before v2 a fenced producer is told
INVALID_PRODUCER_EPOCH (KIP-588).

v4 only adds TRANSACTION_ABORTABLE to the errors (KIP-890) and v5 is transactions v2
(KIP-890 part 2: every EndTxn bumps the epoch and answers the new one, partitions join a
transaction implicitly with their first produce); the coordinator keeps transactions
v1's epochs, so neither is served and clients stay on v1 transactions.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import fencing_error_code
from tierlog.kafka.versions import END_TXN
from tierlog.storage.errors import TierlogError

__all__ = ["end_txn"]

_PRODUCER_FENCED_SINCE = 2


async def end_txn(broker: KafkaBroker, request: RequestPayload, version: int) -> ResponsePayload:
    body: Any = request
    code = ErrorCode.none
    try:
        await broker.coordinators.ensure_transaction_topic()
        await broker.transactions.end_transaction(
            body.transactional_id, body.producer_id, body.producer_epoch, commit=body.committed
        )
    except TierlogError as error:
        code = fencing_error_code(error, version, _PRODUCER_FENCED_SINCE)
    return build(response_type(END_TXN, version), {"throttle_time": 0, "error_code": code})
