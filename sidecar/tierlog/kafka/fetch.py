"""Fetch: whole batches as the log holds them, through the same ``broker.fetch.FetchReader``
the gRPC Fetch uses: the high watermark, the last stable offset and the log start per
partition, read_committed's aborted transactions, and a long poll over every partition
asked until ``min_bytes`` or ``max_wait`` (at most ``MAX_WAIT_MS``).

Fetch sessions (KIP-227, ``fetch_sessions``) are kept as Kafka keeps them: epoch 0 makes
one over the partitions asked, epoch -1 fetches without one, any other epoch fetches the
named session's partitions after the request's additions, changes and forgotten ones,
and answers only the partitions with records, an error or a new high watermark, last
stable offset or log start. From v13 topics are named by id (an id no topic has is
UNKNOWN_TOPIC_ID); a session made by names is not continued by ids, nor the reverse
(FETCH_SESSION_TOPIC_ID_ERROR), as Kafka answers.

Fetches from followers (``replica_id`` >= 0, in ``replica_state`` from v15) are refused:
replicas fetch over gRPC's ReplicaFetch. A partition this broker does not lead is
NOT_LEADER_OR_FOLLOWER with its leader and epoch (``current_leader``, v12+) and, from
v16 (KIP-951), that leader's endpoint.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import NotLeaderOrFollowerError
from tierlog.broker.fetch import MAX_WAIT_MS, FetchAnswer, PartitionFetch
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.current_leader import current_leader, node_endpoints
from tierlog.kafka.errors import error_code
from tierlog.kafka.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    NO_SESSION_ID,
    CachedPartition,
    FetchSession,
    SessionKey,
    next_epoch,
)
from tierlog.kafka.request_client import current_client
from tierlog.kafka.versions import FETCH
from tierlog.storage.errors import TierlogError
from tierlog.storage.records import NO_PARTITION_LEADER_EPOCH
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["fetch"]

_READ_COMMITTED = 1
_TOPIC_IDS_SINCE = 13  # Fetch v13 names topics by id (KIP-516)
_NO_TOPIC_ID = uuid.UUID(int=0)

Answer = FetchAnswer | TierlogError | ErrorCode  # ErrorCode: answered without a read


async def fetch(broker: KafkaBroker, request: RequestPayload, version: int) -> ResponsePayload:
    body: Any = request
    schema = response_type(FETCH, version)
    if _replica_id(body) >= 0:
        return _refused(schema, ErrorCode.not_leader_or_follower)
    uses_topic_ids = version >= _TOPIC_IDS_SINCE
    asked = _asked(body, uses_topic_ids, broker.fetch_max_bytes)
    principal = current_client().principal
    cache = broker.fetch_sessions
    # Before v7 there are no sessions: every fetch is full, without one.
    session_id = int(getattr(body, "session_id", NO_SESSION_ID))
    epoch = int(getattr(body, "session_epoch", FINAL_EPOCH))
    session: FetchSession | None = None
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch: it ends the session named
        if session_id != NO_SESSION_ID:
            cache.remove(session_id, principal)
        partitions = asked
    else:
        session = cache.get(session_id, principal)
        if session is None:
            return _refused(schema, ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return _refused(schema, ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != uses_topic_ids:
            return _refused(schema, ErrorCode.fetch_session_topic_id_error)
        session.epoch = next_epoch(epoch)
        session.update(asked, _forgotten(body, uses_topic_ids))
        partitions = session.partitions
    names = broker.topic_names_by_id() if uses_topic_ids else {}
    answers = await _read(broker, body, partitions, names)
    if epoch == INITIAL_EPOCH:
        session = cache.create(principal, uses_topic_ids, partitions)
    responses: dict[str | uuid.UUID, list[dict[str, Any]]] = {}
    leaders: list[int] = []
    for key, answer in answers.items():
        partition = _partition(key.partition, answer)
        if isinstance(answer, NotLeaderOrFollowerError):
            tp = _topic_partition(key, names)
            assert tp is not None  # read, so named
            leader = current_leader(broker, tp)
            partition["current_leader"] = leader
            leaders.append(leader["leader_id"])
        # A session records what each answer tells; a full answer carries every partition.
        news = session is None or _news(session, key, answer)
        if news or epoch == INITIAL_EPOCH:
            responses.setdefault(key.topic, []).append(partition)
    return build(
        schema,
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "session_id": NO_SESSION_ID if session is None else session.session_id,
            "responses": [
                {"topic": topic, "topic_id": topic, "partitions": partitions}
                for topic, partitions in responses.items()
            ],
            "node_endpoints": node_endpoints(broker, leaders),
        },
    )


async def _read(
    broker: KafkaBroker,
    body: Any,
    partitions: Mapping[SessionKey, CachedPartition],
    names: Mapping[uuid.UUID, str],
) -> dict[SessionKey, Answer]:
    """Each partition's answer, in the order asked; a topic id no topic has is
    UNKNOWN_TOPIC_ID without a read."""
    answers: dict[SessionKey, Answer] = {}
    fetches: list[PartitionFetch] = []
    for key, cached in partitions.items():
        tp = _topic_partition(key, names)
        if tp is None:
            answers[key] = ErrorCode.unknown_topic_id
            continue
        answers[key] = ErrorCode.none  # a place in the order, filled below
        fetches.append(
            PartitionFetch(tp, cached.fetch_offset, cached.max_bytes, cached.leader_epoch)
        )
    wait_ms = min(max(int(body.max_wait.total_seconds() * 1000), 0), MAX_WAIT_MS)
    if len(fetches) < len(answers):  # an error to tell: answered at once, as any error
        wait_ms = 0
    read = await broker.reader.long_poll(
        fetches,
        max(int(body.max_bytes), 0),
        max(int(body.min_bytes), 0),
        wait_ms / 1000,
        int(body.isolation_level) == _READ_COMMITTED,
    )
    read_keys = [key for key, answer in answers.items() if answer is ErrorCode.none]
    answers.update(zip(read_keys, read, strict=True))
    return answers


def _news(session: FetchSession, key: SessionKey, answer: Answer) -> bool:
    """Whether an incremental answer carries the partition (Kafka's
    ``maybeUpdateResponseData``): records or an error always; else only where the log
    stands anew. What it was told is kept; records move it to the session's back."""
    if not isinstance(answer, FetchAnswer):
        return True
    cached = session.partitions.get(key)
    if cached is None:  # forgotten while the fetch waited
        return False
    moved = cached.told(answer.high_watermark, answer.last_stable_offset, answer.log_start_offset)
    if answer.record_batches:
        session.served_last(key)
        return True
    return moved


def _asked(
    body: Any, uses_topic_ids: bool, fetch_max_bytes: int
) -> OrderedDict[SessionKey, CachedPartition]:
    asked: OrderedDict[SessionKey, CachedPartition] = OrderedDict()
    for topic in body.topics:
        for partition in topic.partitions:
            key = SessionKey(_topic_of(topic, uses_topic_ids), partition.partition)
            asked[key] = CachedPartition(
                int(partition.fetch_offset),
                min(max(int(partition.partition_max_bytes), 0), fetch_max_bytes),
                int(getattr(partition, "current_leader_epoch", NO_PARTITION_LEADER_EPOCH)),
            )
    return asked


def _forgotten(body: Any, uses_topic_ids: bool) -> list[SessionKey]:
    return [
        SessionKey(_topic_of(topic, uses_topic_ids), int(partition))
        for topic in body.forgotten_topics_data
        for partition in topic.partitions
    ]


def _topic_of(topic: Any, uses_topic_ids: bool) -> str | uuid.UUID:
    if not uses_topic_ids:
        return str(topic.topic)
    return topic.topic_id or _NO_TOPIC_ID  # kio reads the zero id as None


def _topic_partition(key: SessionKey, names: Mapping[uuid.UUID, str]) -> TopicPartition | None:
    """The partition ``key`` names (None: a topic id no topic has)."""
    if isinstance(key.topic, str):
        return TopicPartition(key.topic, key.partition)
    name = names.get(key.topic)
    return None if name is None else TopicPartition(name, key.partition)


def _replica_id(body: Any) -> int:
    """Who fetches: -1 a consumer, else a follower (``replica_state`` from v15)."""
    if hasattr(body, "replica_state"):
        return int(body.replica_state.replica_id)
    return int(body.replica_id)


def _refused(schema: type[ResponsePayload], code: ErrorCode) -> ResponsePayload:
    """A whole request refused: no session, no partition (Kafka's ``SessionErrorContext``)."""
    return build(
        schema,
        {"throttle_time": 0, "error_code": code, "session_id": NO_SESSION_ID, "responses": []},
    )


def _partition(index: int, answer: Answer) -> dict[str, Any]:
    if not isinstance(answer, FetchAnswer):
        return {
            "partition_index": index,
            "error_code": answer if isinstance(answer, ErrorCode) else error_code(answer),
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
