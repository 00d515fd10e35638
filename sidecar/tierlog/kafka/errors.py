"""Every tierlog error as Kafka's error code: ``reason`` is already Kafka's error name
(``tierlog.storage.errors``, ``tierlog.api.errors``) and kio's ``ErrorCode`` holds
Kafka's whole table under the same names, so the mapping is a lookup, not a list to
keep in step."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tierlog.storage.errors import TierlogError

__all__ = ["error_code", "fencing_error_code"]


def error_code(error: TierlogError) -> ErrorCode:
    """Kafka's code for ``error`` (UNKNOWN_SERVER_ERROR for a name Kafka lacks)."""
    return ErrorCode.__members__.get(error.reason.lower(), ErrorCode.unknown_server_error)


def fencing_error_code(error: TierlogError, version: int, producer_fenced_since: int) -> ErrorCode:
    """``error_code`` for a transaction API whose versions before ``producer_fenced_since``
    predate PRODUCER_FENCED (KIP-588): they are told INVALID_PRODUCER_EPOCH instead, which
    such clients take as the same fatal fencing."""
    code = error_code(error)
    if code is ErrorCode.producer_fenced and version < producer_fenced_since:
        return ErrorCode.invalid_producer_epoch
    return code
