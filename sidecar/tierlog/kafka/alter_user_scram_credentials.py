"""AlterUserScramCredentials (v0): add, replace or delete users' SCRAM credentials,
what ``kafka-configs --alter --add-config 'SCRAM-SHA-256=[...]'`` (and
``--delete-config``) sends. The client salts the password; the broker keeps the salt,
the iterations, StoredKey and ServerKey in the cluster's store, every change of the
request in one write (``ScramCredentials.apply``).

One result per user named: its changes all land, or none when one is refused
(UNACCEPTABLE_CREDENTIAL for iterations outside 4096-16384 or an empty user or salt,
UNSUPPORTED_SASL_MECHANISM, DUPLICATE_RESOURCE for a mechanism named twice,
RESOURCE_NOT_FOUND for deleting what is not there), as Kafka answers. A client not
allowed to (``scram_admin``): CLUSTER_AUTHORIZATION_FAILED for every user."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from tierlog.broker.scram_credentials import CredentialChange
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.codec import build, response_type
from tierlog.kafka.errors import error_code, failure
from tierlog.kafka.scram_admin import NOT_AUTHORIZED, may_manage_credentials
from tierlog.kafka.versions import ALTER_USER_SCRAM_CREDENTIALS

__all__ = ["alter_user_scram_credentials"]


async def alter_user_scram_credentials(
    broker: KafkaBroker, request: RequestPayload, version: int
) -> ResponsePayload:
    body: Any = request
    changes = [CredentialChange(item.name, item.mechanism) for item in body.deletions] + [
        CredentialChange(
            item.name, item.mechanism, item.iterations, item.salt, item.salted_password
        )
        for item in body.upsertions
    ]
    users = list(dict.fromkeys(change.user for change in changes))
    schema = response_type(ALTER_USER_SCRAM_CREDENTIALS, version)
    if not may_manage_credentials():
        refused = (ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED)
        return build(schema, _results(dict.fromkeys(users, refused)))
    try:
        outcomes = await asyncio.to_thread(broker.scram_credentials.apply, changes)
    except Exception as error:
        failed = failure(error, "altering SCRAM credentials")
        return build(schema, _results(dict.fromkeys(users, failed)))
    return build(
        schema,
        _results(
            {
                user: (ErrorCode.none, None) if error is None else (error_code(error), str(error))
                for user, error in outcomes.items()
            }
        ),
    )


def _results(by_user: dict[str, tuple[ErrorCode, str | None]]) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "results": [
            {"user": user, "error_code": code, "error_message": message}
            for user, (code, message) in by_user.items()
        ],
    }
