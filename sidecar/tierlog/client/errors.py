"""The client's errors: Kafka's client exceptions as types, each with its error name.

Errors a broker sends back (``CORRUPT_MESSAGE``, ``MESSAGE_TOO_LARGE``...) are the
storage hierarchy's own types (and the API's, ``tierlog.api.errors``), so one ``reason``
vocabulary serves both ends; ``error_for_reason`` picks the type for a reason read off a
status (``tierlog.client.rpc``).  The ones defined here are the client's own: failures
of the connection, of the client's bookkeeping, and reasons the broker sends that no
other type carries.
"""

from __future__ import annotations

from tierlog.api import errors as api_errors
from tierlog.storage import errors as storage_errors
from tierlog.storage.errors import InvalidConfigError, RecordTooLargeError, TierlogError

__all__ = [
    "RETRIABLE_REASONS",
    "BufferExhaustedError",
    "ConfigError",
    "IllegalProducerStateError",
    "NetworkError",
    "NoOffsetForPartitionError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "RequestTimedOutError",
    "TierlogError",
    "UnknownProducerIdError",
    "UnknownServerError",
    "WakeupError",
    "error_for_reason",
    "is_retriable",
    "reason_of",
    "with_reason",
]


class ConfigError(InvalidConfigError):
    """A client setting is unknown, of the wrong type, out of range, or contradicts another
    (Kafka's ``ConfigException``); ``key`` names the first offending setting."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class BufferExhaustedError(TierlogError, TimeoutError):
    """``buffer.memory`` stayed full for ``max.block.ms``: the producer outran the sidecar
    (Kafka's ``BufferExhaustedException``, a ``TimeoutException``)."""

    reason = "REQUEST_TIMED_OUT"


class OutOfOrderSequenceError(TierlogError):
    """The broker saw a gap in this producer's sequence: records may be lost; the producer
    bumped its epoch to go on (Kafka's ``OutOfOrderSequenceException``)."""

    reason = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class IllegalProducerStateError(TierlogError):
    """The producer's bookkeeping was asked to do something its state forbids, e.g. to
    stamp a batch before it has a producer id (Kafka's ``IllegalStateException``)."""

    reason = "UNKNOWN_SERVER_ERROR"


# Kafka's retriable errors (its ``RetriableException`` subclasses) that a produce can meet:
# a batch that failed with one of these is retried while retries and delivery.timeout.ms
# allow.  CORRUPT_MESSAGE is among them, as in Kafka: the bytes may have been damaged on
# the way, and the retry sends the same bytes again.
RETRIABLE_REASONS = frozenset(
    {
        "CORRUPT_MESSAGE",
        "FENCED_LEADER_EPOCH",
        "KAFKA_STORAGE_ERROR",
        "LEADER_NOT_AVAILABLE",
        "NETWORK_EXCEPTION",
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "NOT_LEADER_OR_FOLLOWER",
        "REQUEST_TIMED_OUT",
        "UNKNOWN_LEADER_EPOCH",
        "UNKNOWN_TOPIC_OR_PARTITION",
        # The sidecar's backpressure (queued.max.requests, queued.max.request.bytes):
        # the request was refused before it was read, so sending it again is safe.
        # Kafka throttles instead of refusing, so its name for this is not retriable.
        "THROTTLING_QUOTA_EXCEEDED",
        # The group coordinator's: it moved, has none, is loading, or a commit is pending.
        "COORDINATOR_LOAD_IN_PROGRESS",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "UNSTABLE_OFFSET_COMMIT",
        # The transaction coordinator's: the previous transaction is being completed.
        "CONCURRENT_TRANSACTIONS",
    }
)


class NetworkError(TierlogError):
    """The connection to a sidecar failed or was closed before it answered: whether a
    produce was stored is unknown (Kafka's ``NetworkException``; retriable)."""

    reason = "NETWORK_EXCEPTION"


class RequestTimedOutError(TierlogError, TimeoutError):
    """No answer within ``request.timeout.ms`` (Kafka's ``TimeoutException``)."""

    reason = "REQUEST_TIMED_OUT"


class UnknownProducerIdError(TierlogError):
    """The broker has no state for this producer id (Kafka's ``UnknownProducerIdException``)."""

    reason = "UNKNOWN_PRODUCER_ID"


class UnknownServerError(TierlogError):
    """A failure the broker could not name (a bug there), or a reason this client does not
    know; ``broker_reason`` keeps the name it was given."""

    reason = "UNKNOWN_SERVER_ERROR"

    def __init__(self, message: str, broker_reason: str = "UNKNOWN_SERVER_ERROR") -> None:
        super().__init__(message)
        self.broker_reason = broker_reason


class NoOffsetForPartitionError(TierlogError):
    """A consumer has no position for a partition and ``auto.offset.reset`` is ``none``
    (Kafka's ``NoOffsetForPartitionException``)."""

    reason = "OFFSET_OUT_OF_RANGE"


class WakeupError(TierlogError):
    """``Consumer.wakeup`` ended a poll (Kafka's ``WakeupException``): how another thread,
    or a signal handler, stops a consumer that is waiting for records."""


def _by_reason() -> dict[str, type[TierlogError]]:
    found: dict[str, type[TierlogError]] = {}
    for module in (storage_errors, api_errors):
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, TierlogError):
                found.setdefault(value.reason, value)
    for own in (NetworkError, RequestTimedOutError, UnknownProducerIdError):
        found[own.reason] = own
    found.pop("UNKNOWN_SERVER_ERROR", None)
    return found


_TYPES_BY_REASON = _by_reason()


def error_for_reason(reason: str, message: str) -> TierlogError:
    """The typed error for a Kafka error name the broker sent (``UnknownServerError`` for
    a name without a type here).  ``NOT_LEADER_OR_FOLLOWER`` needs its owner: see
    ``tierlog.client.rpc``."""
    error_type = _TYPES_BY_REASON.get(reason)
    if error_type is None or error_type is api_errors.NotLeaderOrFollowerError:
        return UnknownServerError(message, reason)
    return error_type(message)


def reason_of(error: TierlogError) -> str:
    """The Kafka error name ``error`` stands for (the broker's, for an unknown one)."""
    return error.broker_reason if isinstance(error, UnknownServerError) else error.reason


def with_reason(error: TierlogError) -> str:
    """``REASON: message`` with the Kafka error name once (a broker's status message
    starts with it already, for clients that read only the message)."""
    reason, message = reason_of(error), str(error)
    return message if message.startswith(f"{reason}: ") else f"{reason}: {message}"


def is_retriable(error: BaseException) -> bool:
    """Kafka's ``RetriableException``: the same request may succeed if sent again."""
    return isinstance(error, TierlogError) and reason_of(error) in RETRIABLE_REASONS
