"""The storage errors, one type per Kafka error name.

Raised deep in the storage code and mapped once, at the network edge, to a status
plus the machine-readable ``reason`` (Kafka's error name) that clients act on.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "CorruptRecordError",
    "CorruptSnapshotError",
    "DataDirNotEmptyError",
    "DuplicateSequenceError",
    "InconsistentClusterIdError",
    "InvalidConfigError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "OffsetMovedToTieredStorageError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "ThrottlingQuotaExceededError",
    "TierlogError",
    "TransactionCoordinatorFencedError",
    "UnexpectedAppendOffsetError",
    "UnknownTopicOrPartitionError",
    "UnsupportedCompressionTypeError",
    "UnsupportedForMessageFormatError",
]


class TierlogError(Exception):
    """Base of every error tierlog raises on purpose; ``reason`` is Kafka's error name."""

    reason: ClassVar[str] = "UNKNOWN_SERVER_ERROR"


class CorruptRecordError(TierlogError):
    """A batch fails its CRC, is truncated, or its header contradicts its bytes."""

    reason = "CORRUPT_MESSAGE"


class InvalidRecordError(TierlogError):
    """A well-formed batch that breaks a rule of the log (e.g. no key on a compacted topic)."""

    reason = "INVALID_RECORD"


class RecordTooLargeError(TierlogError):
    """A batch is larger than ``max.message.bytes``."""

    reason = "MESSAGE_TOO_LARGE"


class RecordBatchTooLargeError(TierlogError):
    """A batch is larger than a segment can ever hold (``segment.bytes``)."""

    reason = "RECORD_LIST_TOO_LARGE"


class UnsupportedForMessageFormatError(TierlogError):
    """A produce in an old message format (magic 0 or 1), which we read but never write."""

    reason = "UNSUPPORTED_FOR_MESSAGE_FORMAT"


class UnsupportedCompressionTypeError(TierlogError):
    """A compression codec id outside Kafka's none/gzip/snappy/lz4/zstd."""

    reason = "UNSUPPORTED_COMPRESSION_TYPE"


class InvalidTimestampError(TierlogError):
    """A record timestamp outside the bounds the topic accepts."""

    reason = "INVALID_TIMESTAMP"


class OffsetOutOfRangeError(TierlogError):
    """An offset below the log start or above the log end."""

    reason = "OFFSET_OUT_OF_RANGE"


class OffsetMovedToTieredStorageError(TierlogError):
    """The offset is in the log, but only in the remote tier, no longer on local disk."""

    reason = "OFFSET_MOVED_TO_TIERED_STORAGE"


class InvalidTopicError(TierlogError):
    """A topic name that breaks Kafka's naming rules."""

    reason = "INVALID_TOPIC_EXCEPTION"


class UnexpectedAppendOffsetError(TierlogError):
    """A follower was given batches that do not continue its log (they start below its
    end, or go back): the replica fetch is out of step with the log, a bug to stop on
    (Kafka's ``UnexpectedAppendOffsetException``, which has no error code of its own)."""


class UnknownTopicOrPartitionError(TierlogError):
    """No log for this topic partition on this broker."""

    reason = "UNKNOWN_TOPIC_OR_PARTITION"


class InvalidConfigError(TierlogError):
    """An unknown configuration key or a value of the wrong type or range."""

    reason = "INVALID_CONFIG"


class KafkaStorageError(TierlogError):
    """The disk failed us: full (ENOSPC), read-only, or an I/O error."""

    reason = "KAFKA_STORAGE_ERROR"


class InconsistentClusterIdError(TierlogError):
    """A log dir's ``meta.properties`` names another cluster than the broker's: the
    volume belongs elsewhere, so the broker does not start on it."""

    reason = "INCONSISTENT_CLUSTER_ID"


class DataDirNotEmptyError(TierlogError):
    """A restore from the tier was asked of a log dir that holds something: restoring
    there would mix the tier's topics with what the dir already has, so the broker
    does not start (empty the dir, or start without the restore)."""

    reason = "DATA_DIR_NOT_EMPTY"


class InvalidProducerEpochError(TierlogError):
    """A producer wrote with an epoch below the one the partition has seen (a zombie)."""

    reason = "INVALID_PRODUCER_EPOCH"


class OutOfOrderSequenceError(TierlogError):
    """A producer's sequence numbers skipped or went back, or a new epoch did not start at 0."""

    reason = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequenceError(TierlogError):
    """A request mixes batches already in the log with new ones (Kafka never sees this:
    its producers send one batch per partition and request)."""

    reason = "DUPLICATE_SEQUENCE_NUMBER"


class InvalidTxnStateError(TierlogError):
    """A non-transactional write from a producer whose transaction is still open."""

    reason = "INVALID_TXN_STATE"


class TransactionCoordinatorFencedError(TierlogError):
    """A transaction marker from a coordinator epoch older than one already seen."""

    reason = "TRANSACTION_COORDINATOR_FENCED"


class CorruptSnapshotError(TierlogError):
    """A producer-state ``.snapshot`` file that cannot be read: ignored on load."""


class ThrottlingQuotaExceededError(TierlogError):
    """The broker is at one of its in-flight limits (``queued.max.requests``,
    ``queued.max.request.bytes``, ``tierlog.validation.max.inflight.decompressed.bytes``)
    and no room came in time: retry later."""

    reason = "THROTTLING_QUOTA_EXCEEDED"
