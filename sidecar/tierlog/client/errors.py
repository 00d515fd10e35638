"""The client's errors: Kafka's client exceptions as types, each with its error name.

Errors a broker sends back (``CORRUPT_MESSAGE``, ``MESSAGE_TOO_LARGE``...) are the
storage hierarchy's own types, so one ``reason`` vocabulary serves both ends; the ones
here are raised by the client itself.
"""

from __future__ import annotations

from tierlog.storage.errors import InvalidConfigError, RecordTooLargeError, TierlogError

__all__ = [
    "RETRIABLE_REASONS",
    "BufferExhaustedError",
    "ConfigError",
    "IllegalProducerStateError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "TierlogError",
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
        "KAFKA_STORAGE_ERROR",
        "LEADER_NOT_AVAILABLE",
        "NETWORK_EXCEPTION",
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "NOT_LEADER_OR_FOLLOWER",
        "REQUEST_TIMED_OUT",
        "UNKNOWN_LEADER_EPOCH",
        "UNKNOWN_TOPIC_OR_PARTITION",
    }
)
