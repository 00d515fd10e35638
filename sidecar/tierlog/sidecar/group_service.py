"""Consumer groups: ``tierlog.v1.GroupService`` over the group coordinator.

FindCoordinator names the leader of the group's ``__consumer_offsets`` partition, or of
a transactional id's ``__transaction_state`` partition (any broker answers), through
the lookup the Kafka listener shares (``replication.coordinator_lookup``), which
creates the topic on first use; so does every group call. The
other calls go to the coordinator (``tierlog.coordinator.coordinator``) and are mapped
here from and to the wire; a partition's own failure is answered in its result.
ConsumerGroupHeartbeat names partitions by topic name on the wire; the coordinator by
topic id (a partition of a topic unknown here is left out of what a member owns).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc

from tierlog.api.errors import InvalidRequestError
from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.api.v1 import group_service_pb2_grpc
from tierlog.broker.partitions import Partitions
from tierlog.coordinator.assignment import Assignment, TopicIdPartition
from tierlog.coordinator.consumer_group import (
    ConsumerGroup,
    Heartbeat,
    TopicImage,
    answer_topics,
)
from tierlog.coordinator.coordinator import (
    GroupCoordinator,
    OffsetToCommit,
    PartitionOutcome,
    TransactionalProducer,
)
from tierlog.replication.coordinator_lookup import CoordinatorLookup, CoordinatorType
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.sidecar.status import as_error, at_the_edge
from tierlog.storage.errors import TierlogError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["GroupService"]

_Context = grpc.aio.ServicerContext[Any, Any]
_COORDINATOR_TYPES = {
    pb.COORDINATOR_TYPE_UNSPECIFIED: CoordinatorType.GROUP,
    pb.COORDINATOR_TYPE_GROUP: CoordinatorType.GROUP,
    pb.COORDINATOR_TYPE_TRANSACTION: CoordinatorType.TRANSACTION,
}


class GroupService(group_service_pb2_grpc.GroupServiceServicer):
    def __init__(
        self,
        partitions: Partitions[ReplicaManager],
        coordinator: GroupCoordinator,
        lookup: CoordinatorLookup,
    ):
        self.partitions = partitions
        self.coordinator = coordinator
        self.lookup = lookup

    # -- finding the coordinator ------------------------------------------------------

    @at_the_edge
    async def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: _Context
    ) -> pb.FindCoordinatorResponse:
        key_type = _COORDINATOR_TYPES.get(request.key_type)
        if key_type is None:
            raise InvalidRequestError(f"coordinator type {request.key_type}: GROUP or TRANSACTION")
        found = await self.lookup.find(key_type, request.key)
        return pb.FindCoordinatorResponse(node_id=found.node_id, address=found.address)

    # -- offsets ----------------------------------------------------------------------

    @at_the_edge
    async def OffsetCommit(
        self, request: pb.OffsetCommitRequest, context: _Context
    ) -> pb.OffsetCommitResponse:
        await self.lookup.ensure_offsets_topic()
        outcomes = await self.coordinator.commit(
            request.group_id,
            _offsets(request.partitions),
            member_id=request.member_id,
            generation_id=request.generation_id,
        )
        return pb.OffsetCommitResponse(results=_results(outcomes))

    @at_the_edge
    async def TxnOffsetCommit(
        self, request: pb.TxnOffsetCommitRequest, context: _Context
    ) -> pb.TxnOffsetCommitResponse:
        await self.lookup.ensure_offsets_topic()
        producer = TransactionalProducer(
            request.transactional_id, request.producer_id, request.producer_epoch
        )
        outcomes = await self.coordinator.commit_transactional(
            request.group_id,
            producer,
            _offsets(request.partitions),
            member_id=request.member_id,
            generation_id=request.generation_id,
        )
        return pb.TxnOffsetCommitResponse(results=_results(outcomes))

    @at_the_edge
    async def OffsetFetch(
        self, request: pb.OffsetFetchRequest, context: _Context
    ) -> pb.OffsetFetchResponse:
        await self.lookup.ensure_offsets_topic()
        answers = self.coordinator.fetch(
            request.group_id,
            [TopicPartition(p.topic, p.partition) for p in request.partitions],
            require_stable=request.require_stable,
        )
        offsets = []
        for tp, committed, error in answers:
            entry = pb.CommittedOffset(
                topic=tp.topic, partition=tp.partition, offset=-1, leader_epoch=-1
            )
            if committed is not None:
                entry.offset = committed.offset
                entry.leader_epoch = committed.leader_epoch
                entry.metadata = committed.metadata
                entry.commit_timestamp_ms = committed.commit_timestamp_ms
            if error is not None:
                entry.error.CopyFrom(as_error(error))
            offsets.append(entry)
        return pb.OffsetFetchResponse(offsets=offsets)

    @at_the_edge
    async def OffsetDelete(
        self, request: pb.OffsetDeleteRequest, context: _Context
    ) -> pb.OffsetDeleteResponse:
        await self.lookup.ensure_offsets_topic()
        outcomes = await self.coordinator.delete_offsets(
            request.group_id, [TopicPartition(p.topic, p.partition) for p in request.partitions]
        )
        return pb.OffsetDeleteResponse(results=_results(outcomes))

    # -- groups -----------------------------------------------------------------------

    @at_the_edge
    async def DeleteGroups(
        self, request: pb.DeleteGroupsRequest, context: _Context
    ) -> pb.DeleteGroupsResponse:
        await self.lookup.ensure_offsets_topic()
        results = []
        for group in request.group_ids:
            result = pb.GroupResult(group_id=group)
            try:
                await self.coordinator.delete_group(group)
            except TierlogError as error:
                result.error.CopyFrom(as_error(error))
            results.append(result)
        return pb.DeleteGroupsResponse(results=results)

    @at_the_edge
    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: _Context
    ) -> pb.ListGroupsResponse:
        return pb.ListGroupsResponse(
            groups=[
                pb.ListedGroup(group_id=listed.group_id, state=listed.state)
                for listed in self.coordinator.list_groups()
            ]
        )

    @at_the_edge
    async def DescribeGroups(
        self, request: pb.DescribeGroupsRequest, context: _Context
    ) -> pb.DescribeGroupsResponse:
        await self.lookup.ensure_offsets_topic()
        state = self.coordinator.describe(request.group_id)
        group = self.coordinator.consumer_group(request.group_id)
        members = [] if group is None else _members(group, self.coordinator.topic_image())
        classic = self.coordinator.classic_group(request.group_id)
        protocol_type = "consumer" if group is not None else ""
        if classic is not None:
            protocol_type = classic.protocol_type or ""
        return pb.DescribeGroupsResponse(
            group_id=request.group_id,
            state=state,
            protocol_type=protocol_type,
            coordinator_id=self.partitions.ownership.node_id,
            members=members,
            assignor="" if group is None else group.assignor(),
        )

    # -- membership (KIP-848) ---------------------------------------------------------

    @at_the_edge
    async def ConsumerGroupHeartbeat(
        self, request: pb.ConsumerGroupHeartbeatRequest, context: _Context
    ) -> pb.ConsumerGroupHeartbeatResponse:
        await self.lookup.ensure_offsets_topic()
        topics = self.coordinator.topic_image()
        heartbeat = Heartbeat(
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=_optional(request, "instance_id"),
            rack_id=_optional(request, "rack_id"),
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=(
                tuple(request.subscribed_topic_names.names)
                if request.HasField("subscribed_topic_names")
                else None
            ),
            subscribed_topic_regex=_optional(request, "subscribed_topic_regex"),
            server_assignor=_optional(request, "server_assignor"),
            owned=_owned(request.owned, topics) if request.HasField("owned") else None,
            client_id=request.client_id,
            client_host=_host(context.peer()),
        )
        answer = await self.coordinator.heartbeat(request.group_id, heartbeat)
        config = self.coordinator.config
        return pb.ConsumerGroupHeartbeatResponse(
            member_id=answer.member_id,
            member_epoch=answer.member_epoch,
            heartbeat_interval_ms=config.consumer_heartbeat_interval_ms,
            session_timeout_ms=config.consumer_session_timeout_ms,
            assignment=[
                pb.TopicPartitions(topic=topic, partitions=partitions)
                for topic, partitions in answer_topics(answer.assignment, topics).items()
            ],
        )


def _members(group: ConsumerGroup, topics: TopicImage) -> list[pb.GroupMember]:
    members = []
    for member_id in group.members:
        subscription = group.subscriptions[member_id]
        current = group.current.get(member_id)
        assigned = current.assigned if current is not None else frozenset()
        members.append(
            pb.GroupMember(
                member_id=member_id,
                client_id=subscription.client_id,
                host=subscription.client_host,
                assignment=[
                    pb.TopicPartitionRef(topic=topic, partition=partition)
                    for topic, partitions in answer_topics(assigned, topics).items()
                    for partition in partitions
                ],
                instance_id=subscription.instance_id or "",
                member_epoch=current.member_epoch if current is not None else 0,
                subscribed_topic_names=subscription.subscribed_topic_names,
                subscribed_topic_regex=subscription.subscribed_topic_regex or "",
            )
        )
    return members


def _optional(request: pb.ConsumerGroupHeartbeatRequest, field: str) -> str | None:
    return str(getattr(request, field)) if request.HasField(field) else None  # type: ignore[arg-type]


def _owned(owned: pb.OwnedPartitions, topics: TopicImage) -> Assignment:
    return frozenset(
        TopicIdPartition(topics[entry.topic].topic_id, partition)
        for entry in owned.topics
        if entry.topic in topics
        for partition in entry.partitions
    )


def _host(peer: str) -> str:
    """Kafka's HOST column ("/127.0.0.1") from a gRPC peer ("ipv4:127.0.0.1:5555")."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return "/" + rest.rsplit(":", 1)[0].strip("[]")
    if kind == "ipv4":
        return "/" + rest.rsplit(":", 1)[0]
    return peer


def _offsets(partitions: Iterable[pb.OffsetCommitPartition]) -> list[OffsetToCommit]:
    return [
        OffsetToCommit(
            TopicPartition(item.topic, item.partition),
            item.offset,
            item.leader_epoch,
            item.metadata,
        )
        for item in partitions
    ]


def _results(outcomes: list[PartitionOutcome]) -> list[pb.PartitionResult]:
    results = []
    for tp, error in outcomes:
        result = pb.PartitionResult(topic=tp.topic, partition=tp.partition)
        if error is not None:
            result.error.CopyFrom(as_error(error))
        results.append(result)
    return results
