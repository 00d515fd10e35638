"""The API's error vocabulary: Kafka's error names, and the gRPC status each maps to.

Storage errors (``tierlog.storage.errors``) carry their Kafka name as ``reason``; the
ones below are raised by the broker around the storage (topics, ownership, request
checks). A failed call ends with ``status_code(reason)``, a ``google.rpc.ErrorInfo``
in the status details (``domain`` ``ERROR_DOMAIN``, ``reason`` the Kafka name) and the
same reason under the trailing metadata key ``REASON_KEY``; for
``NOT_LEADER_OR_FOLLOWER`` the owner's ``id@host:port`` is under ``LEADER_KEY`` too.
Server and client both read this table, so they agree on it.
"""

from __future__ import annotations

import grpc

from tierlog.storage.errors import ThrottlingQuotaExceededError, TierlogError

__all__ = [
    "ERROR_DOMAIN",
    "LEADER_KEY",
    "REASON_KEY",
    "STATUS_CODES",
    "ConcurrentTransactionsError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "DuplicateResourceError",
    "ElectionNotNeededError",
    "EligibleLeadersNotAvailableError",
    "FencedInstanceIdError",
    "FencedLeaderEpochError",
    "FencedMemberEpochError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "GroupSubscribedToTopicError",
    "IllegalGenerationError",
    "InconsistentGroupProtocolError",
    "InvalidGroupIdError",
    "InvalidPartitionsError",
    "InvalidProducerIdMappingError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidSessionTimeoutError",
    "InvalidTransactionTimeoutError",
    "InvalidUpdateVersionError",
    "LeaderNotAvailableError",
    "MemberIdRequiredError",
    "NonEmptyGroupError",
    "NotCoordinatorError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetMetadataTooLargeError",
    "PreferredLeaderNotAvailableError",
    "ProducerFencedError",
    "RebalanceInProgressError",
    "RequestTimedOutError",
    "ResourceNotFoundError",
    "SaslAuthenticationFailedError",
    "StaleBrokerEpochError",
    "StaleMemberEpochError",
    "ThrottlingQuotaExceededError",
    "TopicAlreadyExistsError",
    "TransactionalIdNotFoundError",
    "UnacceptableCredentialError",
    "UnknownLeaderEpochError",
    "UnknownMemberIdError",
    "UnreleasedInstanceIdError",
    "UnstableOffsetCommitError",
    "UnsupportedAssignorError",
    "UnsupportedSaslMechanismError",
    "status_code",
]

ERROR_DOMAIN = "tierlog.io"
REASON_KEY = "tierlog-reason"
LEADER_KEY = "tierlog-leader"


class TopicAlreadyExistsError(TierlogError):
    """CreateTopics for a name that is taken."""

    reason = "TOPIC_ALREADY_EXISTS"


class InvalidPartitionsError(TierlogError):
    """A partition count below 1, or CreatePartitions that does not grow the topic."""

    reason = "INVALID_PARTITIONS"


class InvalidReplicationFactorError(TierlogError):
    """A replication factor below 1, above the brokers there are to hold the replicas,
    or above what this broker can serve."""

    reason = "INVALID_REPLICATION_FACTOR"


class InvalidReplicaAssignmentError(TierlogError):
    """A reassignment's target replicas that cannot be: none, a broker twice, an
    unknown broker, or one that would leave a partition without an in-sync replica."""

    reason = "INVALID_REPLICA_ASSIGNMENT"


class InvalidRequestError(TierlogError):
    """A request field out of its range (negative sizes, unknown special timestamps...)."""

    reason = "INVALID_REQUEST"


class InvalidRequiredAcksError(TierlogError):
    """A produce whose ``acks`` is none of the ``Acks`` values (Kafka accepts 0, 1, -1)."""

    reason = "INVALID_REQUIRED_ACKS"


class NotLeaderOrFollowerError(TierlogError):
    """This broker does not own the partition; ``leader_id``/``leader_address`` does."""

    reason = "NOT_LEADER_OR_FOLLOWER"

    def __init__(self, message: str, *, leader_id: int, leader_address: str) -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.leader_address = leader_address


class LeaderNotAvailableError(TierlogError):
    """The partition has no owner right now (Metadata says leader -1): it is moving
    between brokers. Retriable: ask for metadata again after a backoff."""

    reason = "LEADER_NOT_AVAILABLE"


class FencedLeaderEpochError(TierlogError):
    """The request names a leader epoch older than the partition's: its sender follows a
    leader that has since been replaced. Refresh metadata and retry."""

    reason = "FENCED_LEADER_EPOCH"


class UnknownLeaderEpochError(TierlogError):
    """The request names a leader epoch newer than this broker has learnt: it will catch
    up shortly. Retriable."""

    reason = "UNKNOWN_LEADER_EPOCH"


class NotEnoughReplicasError(TierlogError):
    """An acks=all produce refused before the append: fewer in-sync replicas than the
    topic's ``min.insync.replicas``. Retriable: the ISR may grow back."""

    reason = "NOT_ENOUGH_REPLICAS"


class NotEnoughReplicasAfterAppendError(TierlogError):
    """An acks=all produce that was appended, but the ISR shrank below
    ``min.insync.replicas`` before it was acknowledged: the batches are stored but fewer
    replicas than asked hold them. Retriable (an idempotent retry is deduplicated)."""

    reason = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"


class RequestTimedOutError(TierlogError):
    """An acks=all produce whose batches did not reach every in-sync replica in time: they
    may or may not be committed later. Retriable (an idempotent retry is deduplicated)."""

    reason = "REQUEST_TIMED_OUT"


class InvalidUpdateVersionError(TierlogError):
    """A partition-state change made against a partition epoch that is no longer the
    current one: another change won the race. Re-read the state and decide again."""

    reason = "INVALID_UPDATE_VERSION"

    def __init__(self, message: str, *, current_epoch: int) -> None:
        super().__init__(message)
        self.current_epoch = current_epoch


class IneligibleReplicaError(TierlogError):
    """A leader's ISR change adds a broker whose lease is gone or expired: a fenced broker
    never rejoins an ISR, whatever its last fetch said (Kafka's KIP-841)."""

    reason = "INELIGIBLE_REPLICA"


class StaleBrokerEpochError(TierlogError):
    """A broker's lease was taken by a newer incarnation of that broker: the caller is a
    stale one (it was paused or cut off) and must stop acting for the broker."""

    reason = "STALE_BROKER_EPOCH"


class ElectionNotNeededError(TierlogError):
    """A leader election asked for a partition already led as it would make it: by its
    preferred replica (a preferred election), or by anyone (an unclean one)."""

    reason = "ELECTION_NOT_NEEDED"


class PreferredLeaderNotAvailableError(TierlogError):
    """A preferred leader election for a partition whose preferred replica (its first)
    is not alive or not in sync: it cannot lead yet."""

    reason = "PREFERRED_LEADER_NOT_AVAILABLE"


class EligibleLeadersNotAvailableError(TierlogError):
    """An unclean leader election for an offline partition none of whose replicas is
    alive: there is nobody to elect."""

    reason = "ELIGIBLE_LEADERS_NOT_AVAILABLE"


class SaslAuthenticationFailedError(TierlogError):
    """A missing or wrong bearer token (the broker's ``tierlog.auth.token.file``)."""

    reason = "SASL_AUTHENTICATION_FAILED"


# -- users' SCRAM credentials (AlterUserScramCredentials, DescribeUserScramCredentials) --


class UnacceptableCredentialError(TierlogError):
    """A SCRAM credential outside Kafka's bounds (iterations, an empty user or salt)."""

    reason = "UNACCEPTABLE_CREDENTIAL"


class UnsupportedSaslMechanismError(TierlogError):
    """A SCRAM mechanism number that is neither SCRAM-SHA-256 (1) nor SCRAM-SHA-512 (2)."""

    reason = "UNSUPPORTED_SASL_MECHANISM"


class DuplicateResourceError(TierlogError):
    """One request names the same user (and mechanism) twice."""

    reason = "DUPLICATE_RESOURCE"


class ResourceNotFoundError(TierlogError):
    """A user credential to delete or describe that does not exist."""

    reason = "RESOURCE_NOT_FOUND"


# -- the group coordinator's (Kafka's codes in brackets) -------------------------------


class OffsetMetadataTooLargeError(TierlogError):
    """[12] A commit's metadata string is longer than ``offset.metadata.max.bytes``."""

    reason = "OFFSET_METADATA_TOO_LARGE"


class CoordinatorLoadInProgressError(TierlogError):
    """[14] This broker coordinates the group but is still loading its state from
    ``__consumer_offsets``. Retriable: ask again shortly."""

    reason = "COORDINATOR_LOAD_IN_PROGRESS"


class CoordinatorNotAvailableError(TierlogError):
    """[15] The group's ``__consumer_offsets`` partition has no leader right now.
    Retriable: find the coordinator again."""

    reason = "COORDINATOR_NOT_AVAILABLE"


class NotCoordinatorError(TierlogError):
    """[16] Another broker coordinates the group (or this one just stopped). Retriable:
    find the coordinator again."""

    reason = "NOT_COORDINATOR"


class IllegalGenerationError(TierlogError):
    """[22] A commit names a generation (member epoch) the group is not at."""

    reason = "ILLEGAL_GENERATION"


class InvalidGroupIdError(TierlogError):
    """[24] An empty group id."""

    reason = "INVALID_GROUP_ID"


class UnknownMemberIdError(TierlogError):
    """[25] A commit names a member the group does not have."""

    reason = "UNKNOWN_MEMBER_ID"


class GroupIdNotFoundError(TierlogError):
    """[69] The group has no committed offsets and no members here."""

    reason = "GROUP_ID_NOT_FOUND"


class UnstableOffsetCommitError(TierlogError):
    """[88] OffsetFetch with ``require_stable`` while a commit of the partition is still
    waiting for its acknowledgement. Retriable."""

    reason = "UNSTABLE_OFFSET_COMMIT"


# -- the transaction coordinator's (Kafka's codes in brackets) -------------------------


class InvalidProducerIdMappingError(TierlogError):
    """[49] The transactional id has no producer, or another producer id than the one
    the request names: call InitProducerId first."""

    reason = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeoutError(TierlogError):
    """[50] ``transaction.timeout.ms`` is not positive or is over the broker's
    ``transaction.max.timeout.ms``."""

    reason = "INVALID_TRANSACTION_TIMEOUT"


class ConcurrentTransactionsError(TierlogError):
    """[51] The transactional id's previous transaction is still being completed (its
    markers written). Retriable: ask again shortly."""

    reason = "CONCURRENT_TRANSACTIONS"


class TransactionalIdAuthorizationFailedError(TierlogError):
    """[53] A Produce carries transactional batches but names no transactional id (or
    one the client may not write as): the whole request is refused."""

    reason = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


class ProducerFencedError(TierlogError):
    """[90] A newer producer with the same transactional id has a higher epoch (or the
    transaction timed out and was aborted with one): this producer must close."""

    reason = "PRODUCER_FENCED"


class TransactionalIdNotFoundError(TierlogError):
    """[105] The transactional id is unknown to its coordinator."""

    reason = "TRANSACTIONAL_ID_NOT_FOUND"


# -- KIP-848 membership (ConsumerGroupHeartbeat) ---------------------------------------


class NonEmptyGroupError(TierlogError):
    """[68] DeleteGroups of a group that still has members."""

    reason = "NON_EMPTY_GROUP"


class GroupSubscribedToTopicError(TierlogError):
    """[86] OffsetDelete of a topic a member of the group subscribes to: its offset is
    in use (the members would lose their place)."""

    reason = "GROUP_SUBSCRIBED_TO_TOPIC"


class GroupMaxSizeReachedError(TierlogError):
    """[81] A new member would take the group over ``group.consumer.max.size``."""

    reason = "GROUP_MAX_SIZE_REACHED"


class FencedMemberEpochError(TierlogError):
    """[110] The member's epoch is not one the coordinator accepts (it was fenced, or
    skipped ahead): it must give up all its partitions and join again with epoch 0."""

    reason = "FENCED_MEMBER_EPOCH"


class UnreleasedInstanceIdError(TierlogError):
    """[111] A static member joins with a ``group.instance.id`` another live member holds."""

    reason = "UNRELEASED_INSTANCE_ID"


class UnsupportedAssignorError(TierlogError):
    """[112] A ``server_assignor`` the coordinator does not have."""

    reason = "UNSUPPORTED_ASSIGNOR"


class StaleMemberEpochError(TierlogError):
    """[113] An OffsetCommit from a member carries an epoch that is not its current one:
    the member must catch up (heartbeat) before committing again."""

    reason = "STALE_MEMBER_EPOCH"


# -- classic groups (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) ---------------------


class InconsistentGroupProtocolError(TierlogError):
    """[23] A member's protocol type or protocols match none the group runs, or the
    group id belongs to a group of the other protocol (classic vs KIP-848)."""

    reason = "INCONSISTENT_GROUP_PROTOCOL"


class InvalidSessionTimeoutError(TierlogError):
    """[26] A session timeout outside ``group.min.session.timeout.ms``..``max``."""

    reason = "INVALID_SESSION_TIMEOUT"


class RebalanceInProgressError(TierlogError):
    """[27] The group is rebalancing: the member must join again."""

    reason = "REBALANCE_IN_PROGRESS"


class MemberIdRequiredError(TierlogError):
    """[79] KIP-394: a new member is given its id and must join again with it."""

    reason = "MEMBER_ID_REQUIRED"

    def __init__(self, member_id: str) -> None:
        super().__init__(f"join again as member {member_id!r}")
        self.member_id = member_id


class FencedInstanceIdError(TierlogError):
    """[82] A static member's ``group.instance.id`` now belongs to a newer member id."""

    reason = "FENCED_INSTANCE_ID"


_C = grpc.StatusCode

# Kafka's error name -> the gRPC status a call fails with. Anything else: INTERNAL.
STATUS_CODES: dict[str, grpc.StatusCode] = {
    "CORRUPT_MESSAGE": _C.INVALID_ARGUMENT,
    "INVALID_RECORD": _C.INVALID_ARGUMENT,
    "INVALID_TIMESTAMP": _C.INVALID_ARGUMENT,
    "INVALID_TOPIC_EXCEPTION": _C.INVALID_ARGUMENT,
    "INVALID_CONFIG": _C.INVALID_ARGUMENT,
    "INVALID_PARTITIONS": _C.INVALID_ARGUMENT,
    "INVALID_REPLICATION_FACTOR": _C.INVALID_ARGUMENT,
    "INVALID_REPLICA_ASSIGNMENT": _C.INVALID_ARGUMENT,
    "INVALID_REQUEST": _C.INVALID_ARGUMENT,
    "INVALID_REQUIRED_ACKS": _C.INVALID_ARGUMENT,
    "UNSUPPORTED_FOR_MESSAGE_FORMAT": _C.INVALID_ARGUMENT,
    "UNSUPPORTED_COMPRESSION_TYPE": _C.INVALID_ARGUMENT,
    "INVALID_PRODUCER_EPOCH": _C.FAILED_PRECONDITION,
    "OUT_OF_ORDER_SEQUENCE_NUMBER": _C.FAILED_PRECONDITION,
    "DUPLICATE_SEQUENCE_NUMBER": _C.ALREADY_EXISTS,
    "INVALID_TXN_STATE": _C.FAILED_PRECONDITION,
    "MESSAGE_TOO_LARGE": _C.RESOURCE_EXHAUSTED,
    "RECORD_LIST_TOO_LARGE": _C.RESOURCE_EXHAUSTED,
    "THROTTLING_QUOTA_EXCEEDED": _C.RESOURCE_EXHAUSTED,
    "SASL_AUTHENTICATION_FAILED": _C.UNAUTHENTICATED,
    "OFFSET_OUT_OF_RANGE": _C.OUT_OF_RANGE,
    "OFFSET_MOVED_TO_TIERED_STORAGE": _C.FAILED_PRECONDITION,
    "UNKNOWN_TOPIC_OR_PARTITION": _C.NOT_FOUND,
    "TOPIC_ALREADY_EXISTS": _C.ALREADY_EXISTS,
    "NOT_LEADER_OR_FOLLOWER": _C.FAILED_PRECONDITION,
    "INVALID_UPDATE_VERSION": _C.FAILED_PRECONDITION,
    "STALE_BROKER_EPOCH": _C.FAILED_PRECONDITION,
    "ELECTION_NOT_NEEDED": _C.FAILED_PRECONDITION,
    "PREFERRED_LEADER_NOT_AVAILABLE": _C.UNAVAILABLE,
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": _C.UNAVAILABLE,
    "FENCED_LEADER_EPOCH": _C.FAILED_PRECONDITION,
    "UNKNOWN_LEADER_EPOCH": _C.UNAVAILABLE,
    "NOT_ENOUGH_REPLICAS": _C.UNAVAILABLE,
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND": _C.UNAVAILABLE,
    "KAFKA_STORAGE_ERROR": _C.UNAVAILABLE,
    "LEADER_NOT_AVAILABLE": _C.UNAVAILABLE,
    "REQUEST_TIMED_OUT": _C.DEADLINE_EXCEEDED,
    "INVALID_GROUP_ID": _C.INVALID_ARGUMENT,
    "OFFSET_METADATA_TOO_LARGE": _C.INVALID_ARGUMENT,
    "GROUP_ID_NOT_FOUND": _C.NOT_FOUND,
    "NOT_COORDINATOR": _C.FAILED_PRECONDITION,
    "ILLEGAL_GENERATION": _C.FAILED_PRECONDITION,
    "UNKNOWN_MEMBER_ID": _C.FAILED_PRECONDITION,
    "COORDINATOR_LOAD_IN_PROGRESS": _C.UNAVAILABLE,
    "COORDINATOR_NOT_AVAILABLE": _C.UNAVAILABLE,
    "UNSTABLE_OFFSET_COMMIT": _C.UNAVAILABLE,
    "INVALID_PRODUCER_ID_MAPPING": _C.FAILED_PRECONDITION,
    "INVALID_TRANSACTION_TIMEOUT": _C.INVALID_ARGUMENT,
    "CONCURRENT_TRANSACTIONS": _C.UNAVAILABLE,
    "PRODUCER_FENCED": _C.FAILED_PRECONDITION,
    "TRANSACTIONAL_ID_NOT_FOUND": _C.NOT_FOUND,
    "NON_EMPTY_GROUP": _C.FAILED_PRECONDITION,
    "GROUP_SUBSCRIBED_TO_TOPIC": _C.FAILED_PRECONDITION,
    "GROUP_MAX_SIZE_REACHED": _C.RESOURCE_EXHAUSTED,
    "FENCED_MEMBER_EPOCH": _C.FAILED_PRECONDITION,
    "UNRELEASED_INSTANCE_ID": _C.FAILED_PRECONDITION,
    "UNSUPPORTED_ASSIGNOR": _C.INVALID_ARGUMENT,
    "STALE_MEMBER_EPOCH": _C.FAILED_PRECONDITION,
    "INCONSISTENT_GROUP_PROTOCOL": _C.FAILED_PRECONDITION,
    "INVALID_SESSION_TIMEOUT": _C.INVALID_ARGUMENT,
    "REBALANCE_IN_PROGRESS": _C.UNAVAILABLE,
    "MEMBER_ID_REQUIRED": _C.FAILED_PRECONDITION,
    "FENCED_INSTANCE_ID": _C.FAILED_PRECONDITION,
    "UNKNOWN_SERVER_ERROR": _C.INTERNAL,
}


def status_code(reason: str) -> grpc.StatusCode:
    """The gRPC status for a Kafka error name (INTERNAL for names not in the table)."""
    return STATUS_CODES.get(reason, _C.INTERNAL)
