"""WriteTxnMarkers (v1): each marker (a producer id and epoch, COMMIT or ABORT, a
coordinator epoch) appended to each partition named, as Kafka's leader appends it: what
``kafka-transactions abort`` sends (Admin's ``abortTransaction``, KIP-664) to end a
hanging transaction, with the producer's epoch and last coordinator epoch (or 0) that
DescribeProducers showed. Kafka's coordinators send it to each other too; tierlog's
reach other brokers over gRPC, and every sender ends in the same append
(``coordinator/txn_marker_append.py``: acks=all, the log's coordinator- and
producer-epoch checks, a ``__consumer_offsets`` marker applied by the group coordinator).

Each partition's answer is Kafka's: UNKNOWN_TOPIC_OR_PARTITION for one that does not
exist, NOT_LEADER_OR_FOLLOWER off its leader (the admin finds the leader again and
retries on both), TRANSACTION_COORDINATOR_FENCED for a coordinator epoch below the
partition's last, INVALID_PRODUCER_EPOCH for a producer epoch below its last. As Kafka's
broker maps them, a group coordinator that is loading or moving is NOT_LEADER_OR_FOLLOWER:
the sender retries the marker. There are no ACLs, so Kafka's CLUSTER_ACTION check is not
made.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import failure
from tierlog.kafka.partition_errors import by_topic
from tierlog.kafka.versions import WRITE_TXN_MARKERS
from tierlog.storage.records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["write_txn_markers"]

# A __consumer_offsets partition whose group coordinator is not ready: the marker's
# sender retries NOT_LEADER_OR_FOLLOWER (it expects no coordinator errors from a leader).
_NOT_READY = frozenset(
    {
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
    }
)


async def write_txn_markers(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    markers = await asyncio.gather(*(_marker(broker, marker) for marker in body.markers))
    return build(response_type(WRITE_TXN_MARKERS, version), {"markers": markers})


async def _marker(broker: KafkaBroker, marker: Any) -> dict[str, Any]:
    control = ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT
    batch = build_end_txn_marker_batch(
        EndTransactionMarker(control, marker.coordinator_epoch),
        producer_id=marker.producer_id,
        producer_epoch=marker.producer_epoch,
        timestamp_ms=int(time.time() * 1000),
    )
    asked = [
        TopicPartition(topic.name, partition)
        for topic in marker.topics
        for partition in topic.partition_indexes
    ]
    codes = await asyncio.gather(*(_append(broker, tp, batch) for tp in asked))
    answers = dict(zip(asked, codes, strict=True))
    return {"producer_id": marker.producer_id, "topics": by_topic(asked, answers)}


async def _append(broker: KafkaBroker, tp: TopicPartition, batch: bytes) -> ErrorCode:
    try:
        await broker.txn_markers.append(tp, batch)
    except Exception as error:
        code, _message = failure(error, f"the transaction marker to {tp}")
        return ErrorCode.not_leader_or_follower if code in _NOT_READY else code
    return ErrorCode.none
