"""DescribeUserScramCredentials (v0): each user's SCRAM mechanisms and iterations
(never a salt or key), what ``kafka-configs --describe --entity-type users`` prints.

No users asked (null or empty): every user that has a credential. A user asked twice:
DUPLICATE_RESOURCE; one without credentials: RESOURCE_NOT_FOUND, as Kafka answers. A
client not allowed to (``scram_admin``): CLUSTER_AUTHORIZATION_FAILED for the whole
request."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.broker.scram_credentials import ScramCredential, ScramMechanism
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import failure
from tierlog.kafka.scram_admin import NOT_AUTHORIZED, may_manage_credentials
from tierlog.kafka.versions import DESCRIBE_USER_SCRAM_CREDENTIALS

__all__ = ["describe_user_scram_credentials"]


async def describe_user_scram_credentials(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    schema = response_type(DESCRIBE_USER_SCRAM_CREDENTIALS, version)
    if not may_manage_credentials():
        return build(schema, _refused(ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED))
    try:
        users = await asyncio.to_thread(broker.scram_credentials.read)
    except Exception as error:
        return build(schema, _refused(*failure(error, "reading SCRAM credentials")))
    asked = [user.name for user in body.users or ()] or sorted(users)
    times_asked = Counter(asked)
    results = [
        _result(user, users.get(user, {}), times_asked[user])
        for user in dict.fromkeys(asked)  # each once, in the order asked
    ]
    return build(
        schema,
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "error_message": None,
            "results": results,
        },
    )


def _result(
    user: str, mechanisms: Mapping[ScramMechanism, ScramCredential], times_asked: int
) -> dict[str, Any]:
    if times_asked > 1:
        return _user_error(
            user, ErrorCode.duplicate_resource, "a user is described twice in one request"
        )
    if not mechanisms:
        return _user_error(user, ErrorCode.resource_not_found, f"{user} has no SCRAM credential")
    return {
        "user": user,
        "error_code": ErrorCode.none,
        "error_message": None,
        "credential_infos": [
            {"mechanism": mechanism.value, "iterations": credential.iterations}
            for mechanism, credential in sorted(mechanisms.items(), key=lambda m: m[0].value)
        ],
    }


def _user_error(user: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}


def _refused(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "results": []}
