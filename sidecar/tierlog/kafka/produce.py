"""Produce: each partition's record batches appended as they came, through the same
``broker.produce.Appender`` the gRPC Produce uses (the same checks, validation and
acknowledgement); one error code per partition, as Kafka answers, and with
NOT_LEADER_OR_FOLLOWER the partition's leader and its endpoint (v10+, KIP-951:
``current_leader``). Under ``acks=0`` Kafka sends no response at all, and neither does
this: the listener is told ``None``. Under ``acks=all`` the batches are appended at once
and the answer, which waits for the in-sync replicas, is handed over as an
``AnswerLater``: the listener reads the connection's next request meanwhile.
Transactional batches meet the same producer-state checks as on the gRPC path, and the
batch that would open a producer's transaction on a partition must find that partition
added to it at the coordinator of the request's ``transactional_id``, here or on another
broker (``TransactionCoordinator.verify_append``), and still be in it when appended (the
verification's guard): INVALID_TXN_STATE otherwise. A request with transactional
batches and no ``transactional_id`` is refused whole, every partition told
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka refuses it: no coordinator could ever end
such a transaction.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import NotLeaderOrFollowerError, TransactionalIdAuthorizationFailedError
from tierlog.broker.produce import Acks, Appended, Produced
from tierlog.kafka.answer_later import AnswerLater
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.current_leader import current_leader, node_endpoints
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import PRODUCE
from tierlog.storage.errors import InvalidTxnStateError, TierlogError
from tierlog.storage.log import Log
from tierlog.storage.records import NO_PARTITION_LEADER_EPOCH, iter_batches
from tierlog.storage.topic_partition import TopicPartition
from tierlog.storage.verification_guards import VerificationGuard

__all__ = ["produce"]


async def produce(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload | AnswerLater | None:
    body: Any = request
    acks = int(body.acks)
    partitions = [
        (topic.name, partition) for topic in body.topic_data for partition in topic.partition_data
    ]
    appended: list[Appended | dict[str, Any]]
    if body.transactional_id is None and any(
        _is_transactional(partition.records) for _name, partition in partitions
    ):
        refused = TransactionalIdAuthorizationFailedError(
            "transactional batches need the producer's transactional.id"
        )
        appended = [
            _failed(broker, name, partition.index, refused) for name, partition in partitions
        ]
    else:
        appends = [
            _append(broker, name, partition, acks, body.transactional_id)
            for name, partition in partitions
        ]
        # One partition (the usual request) is awaited as it is: gather would wrap it in
        # a task of its own, a cost the benchmark's profile showed on every produce.
        appended = [await appends[0]] if len(appends) == 1 else await asyncio.gather(*appends)
    if acks == Acks.NONE:
        return None
    indexed = [(name, partition.index) for name, partition in partitions]
    answer = _answer(broker, version, indexed, appended)
    return AnswerLater(answer) if acks == Acks.ALL else await answer


async def _answer(
    broker: KafkaBroker,
    version: int,
    partitions: list[tuple[str, int]],
    appended: list[Appended | dict[str, Any]],
) -> ResponsePayload:
    """The response, once every appended partition's batches are committed (at once
    but under acks=all)."""
    waits = [
        _committed(broker, name, index, outcome)
        for (name, index), outcome in zip(partitions, appended, strict=True)
    ]
    answers = [await waits[0]] if len(waits) == 1 else await asyncio.gather(*waits)
    responses: dict[str, list[dict[str, Any]]] = {}
    for (name, index), answer in zip(partitions, answers, strict=True):
        responses.setdefault(name, []).append({"index": index, **answer})
    leaders = [
        answer["current_leader"]["leader_id"] for answer in answers if "current_leader" in answer
    ]
    return build(
        response_type(PRODUCE, version),
        {
            "throttle_time": 0,
            "responses": [
                {"name": name, "partition_responses": partitions}
                for name, partitions in responses.items()
            ],
            "node_endpoints": node_endpoints(broker, leaders),
        },
    )


async def _append(
    broker: KafkaBroker, topic: str, partition: Any, acks: int, transactional_id: str | None
) -> Appended | dict[str, Any]:
    """The partition's batches appended, or its failed answer."""
    appender = broker.appender
    records = partition.records or b""
    try:
        tp, target = appender.target(topic, partition.index, NO_PARTITION_LEADER_EPOCH, acks)
        guard = None
        if transactional_id is not None:
            guard = await broker.transactions.verify_append(transactional_id, tp, target, records)
        return await _append_verified(broker, tp, target, records, acks, guard)
    except TierlogError as error:
        return _failed(broker, topic, partition.index, error)


def _is_transactional(records: bytes | None) -> bool:
    """Whether the partition's first batch is transactional (Kafka looks no further).
    Bytes that are no batch are not: the append refuses them with their own error."""
    try:
        header = next(iter_batches(records or b""), None)
    except TierlogError:
        return False
    return header is not None and header.is_transactional


async def _append_verified(
    broker: KafkaBroker,
    tp: TopicPartition,
    target: Log,
    records: bytes,
    acks: int,
    guard: VerificationGuard | None,
) -> Appended:
    """The append; refused, when a marker voided its verification meanwhile, and counted."""
    try:
        return await broker.appender.append(tp, target, records, acks, verification_guard=guard)
    except InvalidTxnStateError as error:
        if guard is not None:
            broker.transactions.metrics.verification_refused(error.reason)
        raise


async def _committed(
    broker: KafkaBroker, topic: str, index: int, outcome: Appended | dict[str, Any]
) -> dict[str, Any]:
    """The partition's answer once its appended batches are committed."""
    if not isinstance(outcome, Appended):
        return outcome
    try:
        produced = await broker.appender.committed(outcome)
    except TierlogError as error:
        return _failed(broker, topic, index, error)
    return _succeeded(produced)


def _failed(broker: KafkaBroker, topic: str, index: int, error: TierlogError) -> dict[str, Any]:
    failed: dict[str, Any] = {
        "error_code": error_code(error),
        "base_offset": -1,
        "error_message": str(error),
        "record_errors": (),
    }
    if isinstance(error, NotLeaderOrFollowerError):
        failed["current_leader"] = current_leader(broker, TopicPartition(topic, index))
    return failed


def _succeeded(produced: Produced) -> dict[str, Any]:
    append_time = (
        None
        if produced.log_append_time_ms < 0
        else datetime.datetime.fromtimestamp(produced.log_append_time_ms / 1000, datetime.UTC)
    )
    return {
        "error_code": ErrorCode.none,
        "base_offset": produced.base_offset,
        "log_append_time": append_time,
        "log_start_offset": produced.log_start_offset,
        "record_errors": (),
    }
