"""ElectLeaders: preferred or unclean leader elections, asked for by an administrator
(``kafka-leader-election``), made in the partition-state store by any broker
(``controller.leader_elections``, through ``ReplicatedBroker.elect_leaders``).

Each partition's answer is Kafka's: NONE (elected), ELECTION_NOT_NEEDED,
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or
UNKNOWN_TOPIC_OR_PARTITION. No partitions named (null) means every partition, and the
answer then leaves out those that need no election. v0 and v1 elect the preferred
replica; v2 names the type, one Kafka lacks is INVALID_REQUEST. A request that fails as
a whole (an unknown type, the store unreachable) is answered as Kafka answers it: the
code at the top (v1+) and on every partition named. Without replication a partition's
one replica always leads it: ELECTION_NOT_NEEDED."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import ElectionNotNeededError
from tierlog.controller.leader_elections import (
    AskedPartitions,
    ElectionType,
    TopicOutcomes,
    election_type,
)
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code, failure
from tierlog.kafka.versions import ELECT_LEADERS
from tierlog.storage.errors import (
    InvalidTopicError,
    TierlogError,
    UnknownTopicOrPartitionError,
)

__all__ = ["elect_leaders"]

ELECTION_TYPE_SINCE = 2  # v0 and v1 elect the preferred replica


async def elect_leaders(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    asked: AskedPartitions | None = (
        None
        if body.topic_partitions is None
        else [(topic.topic, topic.partitions) for topic in body.topic_partitions]
    )
    wire_type = body.election_type if version >= ELECTION_TYPE_SINCE else ElectionType.PREFERRED
    try:
        election = election_type(wire_type)
        if broker.elect_leaders is None:
            outcomes = _one_replica_each(broker, asked)
        else:
            outcomes = await broker.elect_leaders(election, asked)
    except Exception as error:
        code, message = failure(error, "ElectLeaders")
        failed = [(topic, [(p, code, message) for p in indexes]) for topic, indexes in asked or ()]
        return _answer(version, code, failed)
    answered = [
        (topic, [(p, *_code_and_message(error)) for p, error in results])
        for topic, results in outcomes
    ]
    return _answer(version, ErrorCode.none, answered)


def _one_replica_each(broker: KafkaBroker, asked: AskedPartitions | None) -> list[TopicOutcomes]:
    """Without replication: every partition known here is led by its one replica."""
    if asked is None:
        return [(topic.name, []) for topic in broker.partitions.topics.topics()]
    outcomes: list[TopicOutcomes] = []
    for topic, indexes in asked:
        results: list[tuple[int, TierlogError | None]] = []
        for index in indexes:
            try:
                broker.partitions.topics.check_partition(topic, index)
            except InvalidTopicError as bad_name:  # no topic has it: unknown, as in Kafka
                results.append((index, UnknownTopicOrPartitionError(str(bad_name))))
                continue
            except TierlogError as error:
                results.append((index, error))
                continue
            results.append((index, ElectionNotNeededError("its one replica leads it")))
        outcomes.append((topic, results))
    return outcomes


def _code_and_message(error: TierlogError | None) -> tuple[ErrorCode, str | None]:
    if error is None:
        return ErrorCode.none, None
    return error_code(error), str(error)


def _answer(
    version: int,
    code: ErrorCode,
    results: Sequence[tuple[str, Sequence[tuple[int, ErrorCode, str | None]]]],
) -> ResponsePayload:
    return build(
        response_type(ELECT_LEADERS, version),
        {
            "throttle_time": 0,
            "error_code": code,
            "replica_election_results": [
                {
                    "topic": topic,
                    "partition_result": [
                        {"partition_id": p, "error_code": c, "error_message": m}
                        for p, c, m in partitions
                    ],
                }
                for topic, partitions in results
            ],
        },
    )
