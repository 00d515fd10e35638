"""Every tierlog error as Kafka's error code: ``reason`` is already Kafka's error name
(``tierlog.storage.errors``, ``tierlog.api.errors``) and kio's ``ErrorCode`` holds
Kafka's whole table under the same names, so the mapping is a lookup, not a list to
keep in step."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from tierlog.storage.errors import TierlogError

__all__ = ["error_code", "failure", "fencing_error_code"]

log = logging.getLogger(__name__)


def error_code(error: TierlogError) -> ErrorCode:
    """Kafka's code for ``error`` (UNKNOWN_SERVER_ERROR for a name Kafka lacks)."""
    return ErrorCode.__members__.get(error.reason.lower(), ErrorCode.unknown_server_error)


def failure(error: Exception, what: str) -> tuple[ErrorCode, str]:
    """Kafka's code and message for one item of a request that failed: a typed error's
    own; anything else is a bug, logged with its trace and answered UNKNOWN_SERVER_ERROR
    (the other items, and the connection, go on)."""
    if isinstance(error, TierlogError):
        return error_code(error), str(error)
    log.error("kafka listener: %s failed", what, exc_info=error)
    return ErrorCode.unknown_server_error, f"{what} failed: {type(error).__name__}"


def fencing_error_code(error: TierlogError, version: int, producer_fenced_since: int) -> ErrorCode:
    """``error_code`` for a transaction API whose versions before ``producer_fenced_since``
    predate PRODUCER_FENCED (KIP-588): they are told INVALID_PRODUCER_EPOCH instead, which
    such clients take as the same fatal fencing."""
    code = error_code(error)
    if code is ErrorCode.producer_fenced and version < producer_fenced_since:
        return ErrorCode.invalid_producer_epoch
    return code
