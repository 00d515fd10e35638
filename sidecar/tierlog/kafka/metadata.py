"""Metadata: every broker whose Kafka address is known (``KafkaBroker.address_of``), the
controller's broker, the topics with their ids, and each partition's leader, leader
epoch, replicas and ISR (``replication.leadership``, the same view the gRPC Metadata
reports), so a client sends each request to the partition's leader and follows a
failover by the epochs.

Topics are never created by a Metadata request (``allow_auto_topic_creation`` is
ignored: Kafka's ``auto.create.topics.enable`` is off here); a topic asked by id that
is unknown is UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import functools
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.broker.internal_topics import INTERNAL_TOPICS
from tierlog.broker.ownership import NO_OWNER
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, nested_entity, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.kept_answers import WrittenAnswer
from tierlog.kafka.versions import METADATA
from tierlog.replication.leadership import leaderships_state, partition_leaderships
from tierlog.storage.errors import TierlogError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["metadata"]


def metadata(broker: KafkaBroker, request: RequestPayload, version: int) -> WrittenAnswer:
    """The answer, as kept while the topics and the published partition states have not
    changed (``kept_answers``). Of the request only its topics are read (the flags
    ``allow_auto_topic_creation`` and ``include_*_authorized_operations`` change
    nothing here), so they and every other input of ``_answer`` make the key."""
    asked: Any = getattr(request, "topics", None)
    if asked is None or (version == 0 and not asked):  # null (v0: empty): every topic
        wanted: tuple[tuple[str | None, Any], ...] | None = None
    else:
        wanted = tuple((t.name, getattr(t, "topic_id", None)) for t in asked)
    state = (broker.partitions.topics.version, leaderships_state(broker.partitions))
    brokers = tuple(broker.known_brokers())
    key = (version, wanted, brokers, broker.cluster_id, broker.controller_id)
    return broker.metadata_answers.answer(
        state, key, lambda: _answer(broker, version, wanted, brokers)
    )


def _answer(
    broker: KafkaBroker,
    version: int,
    wanted: tuple[tuple[str | None, Any], ...] | None,
    brokers: tuple[tuple[int, str, int], ...],
) -> ResponsePayload:
    store = broker.partitions.topics
    manager = broker.partitions.manager
    if wanted is None:
        wanted = tuple((t.name, None) for t in store.topics())
    by_id = broker.topic_names_by_id()
    listed = frozenset(node_id for node_id, _host, _port in brokers)
    schema = response_type(METADATA, version)
    partition_schema: Any = nested_entity(nested_entity(schema, "topics"), "partitions")
    topics = []
    for name, topic_id in wanted:
        if name is None:  # asked by id (v10+)
            if topic_id not in by_id:
                topics.append(_topic_error(None, topic_id, ErrorCode.unknown_topic_id))
                continue
            name = by_id[topic_id]
        try:
            topic = store.get(name)
        except TierlogError as error:
            topics.append(_topic_error(name, topic_id, error_code(error)))
            continue
        topics.append(
            {
                "error_code": ErrorCode.none,
                "name": name,
                "topic_id": manager.topic_id(name),
                "is_internal": name in INTERNAL_TOPICS,
                "partitions": _partitions(
                    broker, name, topic.partition_count, partition_schema, listed
                ),
            }
        )
    return build(
        schema,
        {
            "throttle_time": 0,
            "brokers": [
                {"node_id": node_id, "host": host, "port": port} for node_id, host, port in brokers
            ],
            "cluster_id": broker.cluster_id,
            "controller_id": broker.controller_id,
            "topics": topics,
            "error_code": ErrorCode.none,  # v13: REBOOTSTRAP_REQUIRED is never asked of clients
        },
    )


def _partitions(
    broker: KafkaBroker, name: str, count: int, schema: Any, listed: frozenset[int]
) -> list[Any]:
    leaderships = partition_leaderships(
        broker.partitions, (TopicPartition(name, p) for p in range(count))
    )
    return [
        _partition(
            schema,
            p,
            leadership.leader_id,
            leadership.leader_epoch,
            tuple(leadership.replicas),
            tuple(leadership.isr),
            listed,
        )
        for p, leadership in enumerate(leaderships)
    ]


# Partition entries kept (under 1 KiB each with their bytes in ``memoized_entities``):
# 4,000 partitions in four versions at once (one per kind of client), a partition's
# next state pushing out the oldest. An answer of more partitions than this finds none
# of them kept (least recently used goes first) and costs what building them does.
_KEPT_PARTITIONS = 1 << 14


@functools.lru_cache(maxsize=_KEPT_PARTITIONS)
def _partition(
    schema: Any,
    index: int,
    leader_id: int,
    leader_epoch: int,
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    listed: frozenset[int],
) -> Any:
    """A partition's entry, built once for each distinct values: from one answer to the
    next nearly all of a topic's thousands of partitions are unchanged (kio's entities are
    frozen, so one serves every answer; ``memoized_entities`` writes it from its bytes).

    A leader not among the brokers listed (moving, dead, or of unknown address) is
    reported as none, LEADER_NOT_AVAILABLE, as Kafka reports a leader that is not alive:
    a client never meets a leader id it has no address for, and asks again."""
    reachable = leader_id in listed
    return build(
        schema,
        {
            "error_code": ErrorCode.none if reachable else ErrorCode.leader_not_available,
            "partition_index": index,
            "leader_id": leader_id if reachable else NO_OWNER,
            "leader_epoch": leader_epoch,
            "replica_nodes": replicas,
            "isr_nodes": isr,
            "offline_replicas": tuple(r for r in replicas if r not in listed),
        },
    )


def _topic_error(name: str | None, topic_id: Any, code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": topic_id, "partitions": []}
