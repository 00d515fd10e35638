"""InitProducerId for idempotent producers (no ``transactional_id``): an id from the same
``broker.producer_ids`` the gRPC InitProducerId hands out, or the epoch bumped for the
id and epoch the producer names (v3+, KIP-360). Transactional producers need the
transaction coordinator's APIs too (AddPartitionsToTxn, EndTxn...), not served here
yet: they are refused with INVALID_REQUEST and the reason in the broker's log.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import INIT_PRODUCER_ID
from tierlog.storage.errors import TierlogError

__all__ = ["init_producer_id"]

log = logging.getLogger(__name__)


async def init_producer_id(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    schema = response_type(INIT_PRODUCER_ID, version)
    if body.transactional_id is not None:
        log.warning(
            "kafka listener: transactional producer %r refused: transactions are served "
            "over gRPC only for now",
            body.transactional_id,
        )
        return build(schema, _refused(ErrorCode.invalid_request))
    try:
        producer_id, epoch = await asyncio.to_thread(
            broker.producer_ids.init_producer_id,
            int(getattr(body, "producer_id", -1)),
            int(getattr(body, "producer_epoch", -1)),
        )
    except TierlogError as error:
        return build(schema, _refused(error_code(error)))
    return build(
        schema,
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "producer_id": producer_id,
            "producer_epoch": epoch,
        },
    )


def _refused(code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
