"""Fetch: whole batches as the log holds them, through the same ``broker.fetch.FetchReader``
the gRPC Fetch uses: the high watermark, the last stable offset and the log start per
partition, read_committed's aborted transactions, and a long poll over every partition
asked until ``min_bytes`` or ``max_wait`` (at most ``MAX_WAIT_MS``).

Fetch sessions (KIP-227) are not kept: every answer carries session id 0, which tells
the client that no session was made, so its next fetch is a full one again (Kafka's
``FetchSessionHandler`` does exactly this when a broker's session cache is full). A
request naming a session id this broker never gave is FETCH_SESSION_ID_NOT_FOUND, as
Kafka answers for a session it evicted. Fetches from followers (``replica_id`` >= 0) are
refused: replicas fetch over gRPC's ReplicaFetch. A partition this broker does not lead
is NOT_LEADER_OR_FOLLOWER with its leader and epoch (``current_leader``, v12+); the
leader's endpoint comes with v16 (KIP-951), past the versions served here.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import NotLeaderOrFollowerError
from tierlog.broker.fetch import MAX_WAIT_MS, FetchAnswer, PartitionFetch
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.current_leader import current_leader
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import FETCH
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["fetch"]

_READ_COMMITTED = 1


async def fetch(broker: KafkaBroker, request: RequestPayload, version: int) -> ResponsePayload:
    body: Any = request
    schema = response_type(FETCH, version)
    session_id = int(getattr(body, "session_id", 0))
    if session_id != 0 or int(getattr(body, "replica_id", -1)) >= 0:
        code = (
            ErrorCode.fetch_session_id_not_found if session_id else ErrorCode.not_leader_or_follower
        )
        return build(
            schema, {"throttle_time": 0, "error_code": code, "session_id": 0, "responses": []}
        )
    fetches = [
        PartitionFetch(
            TopicPartition(topic.topic, partition.partition),
            partition.fetch_offset,
            min(max(partition.partition_max_bytes, 0), broker.fetch_max_bytes),
            getattr(partition, "current_leader_epoch", -1),
        )
        for topic in body.topics
        for partition in topic.partitions
    ]
    wait_ms = min(max(int(body.max_wait.total_seconds() * 1000), 0), MAX_WAIT_MS)
    answers = await broker.reader.long_poll(
        fetches,
        max(int(getattr(body, "max_bytes", broker.fetch_max_bytes)), 0),
        max(int(body.min_bytes), 0),
        wait_ms / 1000,
        int(getattr(body, "isolation_level", 0)) == _READ_COMMITTED,
    )
    responses: dict[str, list[dict[str, Any]]] = {}
    for asked, answer in zip(fetches, answers, strict=True):
        partition = _partition(asked.tp.partition, answer)
        if isinstance(answer, NotLeaderOrFollowerError):
            partition["current_leader"] = current_leader(broker, asked.tp)
        responses.setdefault(asked.tp.topic, []).append(partition)
    return build(
        schema,
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "session_id": 0,
            "responses": [
                {"topic": topic, "partitions": partitions}
                for topic, partitions in responses.items()
            ],
        },
    )


def _partition(index: int, answer: Any) -> dict[str, Any]:
    if not isinstance(answer, FetchAnswer):
        return {
            "partition_index": index,
            "error_code": error_code(answer),
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": -1,
            "aborted_transactions": None,
            "records": None,
        }
    return {
        "partition_index": index,
        "error_code": ErrorCode.none,
        "high_watermark": answer.high_watermark,
        "last_stable_offset": answer.last_stable_offset,
        "log_start_offset": answer.log_start_offset,
        "aborted_transactions": [
            {"producer_id": txn.producer_id, "first_offset": txn.first_offset}
            for txn in answer.aborted_transactions
        ],
        "records": answer.record_batches,
    }
