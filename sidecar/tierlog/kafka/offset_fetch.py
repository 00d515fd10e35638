"""OffsetFetch: a group's committed offsets from the group coordinator's ``fetch``, the
same call as the gRPC OffsetFetch (offsets committed through either door are read
through both).

v1-v7 ask one group, v8+ a batch of groups, each answered on its own. Topics null (v2+)
asks every offset the group has; a partition without one answers offset -1. With
``require_stable`` (v7+) a partition whose commit is not acknowledged yet, or waits for
its transaction's marker, is UNSTABLE_OFFSET_COMMIT, which the client retries. A group
refused as a whole (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, and from v9 a KIP-848
member's UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH) is the group's error code (v2+),
or each asked partition's at v1, which has no other place for it.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.versions import OFFSET_FETCH
from tierlog.storage.errors import TierlogError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["offset_fetch"]

_GROUP_ERROR_VERSION = 2  # a top-level error code
_BATCHED_VERSION = 8  # groups asked in a batch


async def offset_fetch(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    require_stable = bool(getattr(body, "require_stable", False))
    schema = response_type(OFFSET_FETCH, version)
    if version < _BATCHED_VERSION:
        answer = await _group(broker, body.group_id, body.topics, require_stable, None, -1)
        if version < _GROUP_ERROR_VERSION and answer["error_code"] != ErrorCode.none:
            answer["topics"] = _asked_with_error(body.topics, answer["error_code"])
        return build(schema, {"throttle_time": 0, **answer})
    groups = [
        await _group(
            broker,
            group.group_id,
            group.topics,
            require_stable,
            getattr(group, "member_id", None),
            getattr(group, "member_epoch", -1),
        )
        for group in body.groups
    ]
    return build(schema, {"throttle_time": 0, "groups": groups})


async def _group(
    broker: KafkaBroker,
    group_id: str,
    topics: Any,
    require_stable: bool,
    member_id: str | None,
    member_epoch: int,
) -> dict[str, Any]:
    asked = [
        TopicPartition(topic.name, int(index))
        for topic in topics or ()
        for index in topic.partition_indexes
    ]
    try:
        await broker.coordinators.ensure_offsets_topic()
        answers = broker.groups.fetch(
            group_id,
            asked,
            require_stable=require_stable,
            member_id=member_id,
            member_epoch=member_epoch,
        )
    except TierlogError as error:
        return {"group_id": group_id, "error_code": error_code(error), "topics": []}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for tp, committed, refused in answers:
        by_name.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": -1 if committed is None else committed.offset,
                "committed_leader_epoch": -1 if committed is None else committed.leader_epoch,
                "metadata": "" if committed is None else committed.metadata,
                "error_code": ErrorCode.none if refused is None else error_code(refused),
            }
        )
    return {
        "group_id": group_id,
        "error_code": ErrorCode.none,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_name.items()],
    }


def _asked_with_error(topics: Any, code: ErrorCode) -> list[dict[str, Any]]:
    return [
        {
            "name": topic.name,
            "partitions": [
                {
                    "partition_index": index,
                    "committed_offset": -1,
                    "metadata": "",
                    "error_code": code,
                }
                for index in topic.partition_indexes
            ],
        }
        for topic in topics or ()
    ]
