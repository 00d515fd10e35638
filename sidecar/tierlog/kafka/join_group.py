"""JoinGroup (classic groups): a member joins, or rejoins for a rebalance, through the
group coordinator's ``join_group``; the answer is a long poll the coordinator completes
when the rebalance does (the listener handles one request per connection at a time, so
the connection waits, as a Kafka client expects).

From v4 a new dynamic member is first answered MEMBER_ID_REQUIRED with its member id
(KIP-394) and joins again with it; v2-v3 members join at once. v5 adds static members
(``group_instance_id``), v7 the protocol type in the answer, v8 a reason (logged by
Kafka, ignored here), v9 ``skip_assignment`` (always false: a static leader coming back
rebalances instead).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.api.errors import MemberIdRequiredError
from tierlog.coordinator.classic_group import JoinRequest
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code
from tierlog.kafka.request_client import current_client
from tierlog.kafka.versions import JOIN_GROUP
from tierlog.storage.errors import TierlogError

__all__ = ["join_group"]

_KNOWN_MEMBER_ID_VERSION = 4  # KIP-394
_NULLABLE_PROTOCOL_VERSION = 7  # a refusal's protocol type and name are null from v7


async def join_group(broker: KafkaBroker, request: RequestPayload, version: int) -> ResponsePayload:
    body: Any = request
    schema = response_type(JOIN_GROUP, version)
    client = current_client()
    join = JoinRequest(
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=body.protocol_type,
        protocols=tuple((protocol.name, protocol.metadata) for protocol in body.protocols),
        session_timeout_ms=_ms(body.session_timeout),
        rebalance_timeout_ms=_ms(body.rebalance_timeout),
        client_id=client.client_id,
        client_host=client.host,
        require_known_member_id=version >= _KNOWN_MEMBER_ID_VERSION,
    )
    try:
        await broker.coordinators.ensure_offsets_topic()
        answer = await broker.groups.join_group(body.group_id, join)
    except MemberIdRequiredError as required:
        return build(schema, _refused(ErrorCode.member_id_required, required.member_id, version))
    except TierlogError as error:
        return build(schema, _refused(error_code(error), body.member_id, version))
    members = [
        {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
        for m in answer.members
    ]
    return build(
        schema,
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "generation_id": answer.generation,
            "protocol_type": answer.protocol_type,
            "protocol_name": answer.protocol_name or "",
            "leader": answer.leader,
            "skip_assignment": False,
            "member_id": answer.member_id,
            "members": members,
        },
    )


def _ms(value: Any) -> int:
    """Milliseconds of a kio ``timedelta_i32`` field."""
    return int(value.total_seconds() * 1000)


def _refused(code: ErrorCode, member_id: str, version: int) -> dict[str, Any]:
    protocol = None if version >= _NULLABLE_PROTOCOL_VERSION else ""
    return {
        "throttle_time": 0,
        "error_code": code,
        "generation_id": -1,
        "protocol_type": protocol,
        "protocol_name": protocol,
        "leader": "",
        "member_id": member_id,
        "members": [],
    }
