"""A consumer group's coordinator, found and followed: commits, committed offsets, admin.

Kafka's consumer finds its group's coordinator with FindCoordinator (any broker
answers), sends the group's calls there, and on NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE
or a lost connection forgets it and finds it again; COORDINATOR_LOAD_IN_PROGRESS is
waited out on the same coordinator. ``GroupClient`` does the same for each call, backing
off ``retry.backoff.ms`` (doubling up to ``retry.backoff.max.ms``) until the call's
timeout (``coordinator_client``). ``ConsumerGroups`` is the admin side over it (Kafka's
``Admin`` group calls): list (every broker lists the groups it coordinates), describe,
offsets, alter, delete.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import grpc

from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.api.v1 import group_service_pb2_grpc
from tierlog.client.cluster import Cluster
from tierlog.client.coordinator_client import CoordinatorClient
from tierlog.client.errors import TierlogError, reason_of
from tierlog.client.rpc import error_from_proto, error_from_rpc
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "ConsumerGroupMetadata",
    "ConsumerGroups",
    "GroupClient",
    "GroupListing",
    "OffsetAndMetadata",
]

_T = TypeVar("_T")


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed offset: the next record the group reads (Kafka's class of that name)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1  # of the last record consumed; -1: unknown
    commit_timestamp_ms: int = -1  # as the coordinator stored it (-1 in a commit)


@dataclass(frozen=True)
class ConsumerGroupMetadata:
    """A consumer's place in its group (Kafka's class of that name): its member id and
    epoch ("" and -1 outside the group's membership)."""

    group_id: str
    member_id: str = ""
    generation_id: int = -1
    group_instance_id: str | None = None


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    state: str
    coordinator: str  # the address that listed it


class GroupClient:
    """One group's calls, sent to its coordinator wherever it is (``CoordinatorClient``)."""

    def __init__(
        self,
        cluster: Cluster,
        group_id: str,
        *,
        timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
    ) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.timeout_s = timeout_ms / 1000
        self._calls = CoordinatorClient(
            cluster,
            group_id,
            pb.COORDINATOR_TYPE_GROUP,
            timeout_ms=timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            # A commit's stale member epoch: the heartbeat thread is about to learn the
            # new one, and the commit is sent with it.
            wait_reasons=("UNSTABLE_OFFSET_COMMIT", "STALE_MEMBER_EPOCH"),
        )
        # (member id, member epoch) commits are sent with: a member's, set by its
        # heartbeats (``membership``), or ("", -1) outside the group's membership.
        self.generation: tuple[str, int] = ("", -1)

    def coordinator(self) -> str:
        """The coordinator's address (asked for once, then kept until it fails)."""
        return self._calls.coordinator()

    def call(
        self,
        method: Callable[[group_service_pb2_grpc.GroupServiceStub], _T],
        *,
        timeout_s: float | None = None,
    ) -> _T:
        """``method`` on the coordinator, retried as Kafka's consumer retries it (for
        ``timeout_s``, by default the client's)."""
        return self._calls.call(
            lambda channel: method(group_service_pb2_grpc.GroupServiceStub(channel)),
            timeout_s=timeout_s,
        )

    # -- offsets ----------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Store ``offsets`` (acknowledged once the coordinator's log committed them);
        the first partition's error is raised. Each attempt carries the member's latest
        ``generation``."""
        partitions = _commit_partitions(offsets)

        def commit(stub: group_service_pb2_grpc.GroupServiceStub) -> pb.OffsetCommitResponse:
            member_id, epoch = self.generation
            request = pb.OffsetCommitRequest(
                group_id=self.group_id,
                member_id=member_id,
                generation_id=epoch,
                partitions=partitions,
            )
            return stub.OffsetCommit(request, timeout=self.timeout_s)

        _raise_first(self.call(commit).results)

    def commit_transactional(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
    ) -> None:
        """TxnOffsetCommit: ``offsets`` written in the producer's transaction (after
        AddOffsetsToTxn), the group's once it commits; the first partition's error is
        raised."""
        request = pb.TxnOffsetCommitRequest(
            transactional_id=transactional_id,
            group_id=self.group_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            member_id=group_metadata.member_id,
            generation_id=group_metadata.generation_id,
            partitions=_commit_partitions(offsets),
        )
        response = self.call(lambda stub: stub.TxnOffsetCommit(request, timeout=self.timeout_s))
        _raise_first(response.results)

    def heartbeat(
        self, request: pb.ConsumerGroupHeartbeatRequest
    ) -> pb.ConsumerGroupHeartbeatResponse:
        """One ConsumerGroupHeartbeat, retried for at most a request timeout (the next
        beat is the better retry after that)."""
        timeout_s = self.cluster.request_timeout_s
        return self.call(
            lambda stub: stub.ConsumerGroupHeartbeat(request, timeout=timeout_s),
            timeout_s=timeout_s,
        )

    def committed(
        self, partitions: Iterable[TopicPartition] = (), *, require_stable: bool = True
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's offsets of ``partitions`` (all it has when none are named); None
        for a partition without one."""
        request = pb.OffsetFetchRequest(
            group_id=self.group_id,
            partitions=[pb.TopicPartitionRef(topic=t, partition=p) for t, p in partitions],
            require_stable=require_stable,
        )

        def fetch(stub: group_service_pb2_grpc.GroupServiceStub) -> pb.OffsetFetchResponse:
            response = stub.OffsetFetch(request, timeout=self.timeout_s)
            for entry in response.offsets:
                if entry.HasField("error"):  # unstable: raised into call()'s retries
                    raise error_from_proto(entry.error)
            return response

        found: dict[TopicPartition, OffsetAndMetadata | None] = {}
        for entry in self._fetch_with_retries(fetch).offsets:
            tp = TopicPartition(entry.topic, entry.partition)
            found[tp] = (
                None
                if entry.offset < 0
                else OffsetAndMetadata(
                    entry.offset, entry.metadata, entry.leader_epoch, entry.commit_timestamp_ms
                )
            )
        return found

    def _fetch_with_retries(
        self, fetch: Callable[[group_service_pb2_grpc.GroupServiceStub], pb.OffsetFetchResponse]
    ) -> pb.OffsetFetchResponse:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return self.call(fetch)
            except TierlogError as error:
                if reason_of(error) != "UNSTABLE_OFFSET_COMMIT" or time.monotonic() > deadline:
                    raise
            time.sleep(self._calls.retry_backoff_s)

    def delete_offsets(self, partitions: Iterable[TopicPartition]) -> None:
        request = pb.OffsetDeleteRequest(
            group_id=self.group_id,
            partitions=[pb.TopicPartitionRef(topic=t, partition=p) for t, p in partitions],
        )
        response = self.call(lambda stub: stub.OffsetDelete(request, timeout=self.timeout_s))
        _raise_first(response.results)

    # -- the group --------------------------------------------------------------------

    def describe(self) -> pb.DescribeGroupsResponse:
        request = pb.DescribeGroupsRequest(group_id=self.group_id)
        return self.call(lambda stub: stub.DescribeGroups(request, timeout=self.timeout_s))

    def delete(self) -> None:
        request = pb.DeleteGroupsRequest(group_ids=[self.group_id])
        response = self.call(lambda stub: stub.DeleteGroups(request, timeout=self.timeout_s))
        for result in response.results:
            if result.HasField("error"):
                raise error_from_proto(result.error)


class ConsumerGroups:
    """Groups as an administrator sees them (Kafka's ``Admin`` group calls)."""

    def __init__(self, cluster: Cluster, *, timeout_ms: int = 30_000) -> None:
        self.cluster = cluster
        self.timeout_ms = timeout_ms

    def group(self, group_id: str) -> GroupClient:
        return GroupClient(self.cluster, group_id, timeout_ms=self.timeout_ms)

    def list(self) -> list[GroupListing]:
        """Every group, asking each broker for those it coordinates."""
        listed: list[GroupListing] = []
        for address in self.cluster.broker_addresses():
            stub = group_service_pb2_grpc.GroupServiceStub(self.cluster.channel(address))
            try:
                response = stub.ListGroups(
                    pb.ListGroupsRequest(), timeout=self.cluster.request_timeout_s
                )
            except grpc.RpcError as error:
                raise error_from_rpc(error) from None
            listed += [GroupListing(g.group_id, g.state, address) for g in response.groups]
        return sorted(listed, key=lambda listing: listing.group_id)


def _commit_partitions(
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> list[pb.OffsetCommitPartition]:
    return [
        pb.OffsetCommitPartition(
            topic=tp.topic,
            partition=tp.partition,
            offset=committed.offset,
            leader_epoch=committed.leader_epoch,
            metadata=committed.metadata,
        )
        for tp, committed in offsets.items()
    ]


def _raise_first(results: Iterable[pb.PartitionResult]) -> None:
    for result in results:
        if result.HasField("error"):
            raise error_from_proto(result.error)
