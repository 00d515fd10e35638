"""InitProducerId: an idempotent producer's id (no ``transactional_id``) from the same
``broker.producer_ids`` the gRPC InitProducerId hands out, or the epoch bumped for the id
and epoch the producer names (v3+, KIP-360); a transactional producer's id and epoch from
its transaction coordinator, as the gRPC TransactionService gets them: the next epoch of
the id (fencing the previous producer, whose open transaction is aborted first), or, when
the producer names its id and epoch (v3+, KIP-360, after an abortable error), PRODUCER_FENCED
unless it is still the id's current producer. CONCURRENT_TRANSACTIONS while the id's last
transaction is being completed (the client retries). Before v4 a fenced producer is told
INVALID_PRODUCER_EPOCH (KIP-588).
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import fencing_error_code
from tierlog.kafka.versions import INIT_PRODUCER_ID
from tierlog.storage.errors import TierlogError

__all__ = ["init_producer_id"]

# The first version that knows PRODUCER_FENCED.
_PRODUCER_FENCED_SINCE = 4
_MILLISECOND = datetime.timedelta(milliseconds=1)


async def init_producer_id(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    producer_id = int(getattr(body, "producer_id", -1))
    epoch = int(getattr(body, "producer_epoch", -1))
    try:
        if body.transactional_id is None:
            producer_id, epoch = await asyncio.to_thread(
                broker.producer_ids.init_producer_id, producer_id, epoch
            )
        else:
            await broker.coordinators.ensure_transaction_topic()
            producer_id, epoch = await broker.transactions.init_producer_id(
                body.transactional_id,
                body.transaction_timeout // _MILLISECOND,
                producer_id,
                epoch,
            )
    except TierlogError as error:
        code = fencing_error_code(error, version, _PRODUCER_FENCED_SINCE)
        return _answer(version, code, -1, -1)
    return _answer(version, ErrorCode.none, producer_id, epoch)


def _answer(version: int, code: ErrorCode, producer_id: int, epoch: int) -> ResponsePayload:
    return build(
        response_type(INIT_PRODUCER_ID, version),
        {
            "throttle_time": 0,
            "error_code": code,
            "producer_id": producer_id,
            "producer_epoch": epoch,
        },
    )
