"""Topic administration and metadata: ``tierlog.v1.AdminService``.

A thin mapping from and to its wire: topic changes are the broker core's
(``broker.topic_changes``, which the Kafka listener's admin APIs share).

Calls about many topics answer each in its own result with an ``Error``; calls about
one topic fail with a status, like the data plane.

Without replication each partition has one owner: it is the partition's leader, its only
replica and its whole ISR, at leader epoch 0. With replication Metadata reports the
partition-state store's leaders, leader epochs, replicas and ISRs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import grpc

from tierlog.api.v1 import admin_service_pb2, admin_service_pb2_grpc, common_pb2
from tierlog.broker.partitions import Partitions
from tierlog.broker.topic_changes import TopicChanges
from tierlog.broker.topic_configs import ConfigSource, topic_configs
from tierlog.broker.topics import Topic
from tierlog.replication.leadership import partition_leadership
from tierlog.replication.replica_manager import Leadership, ReplicaManager
from tierlog.sidecar.assignment_updates import AssignmentUpdates
from tierlog.sidecar.status import as_error, at_the_edge, unexpected
from tierlog.storage.errors import TierlogError, UnknownTopicOrPartitionError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["AdminService"]

_Context = grpc.aio.ServicerContext[Any, Any]


async def _in_band(what: str, change: Awaitable[Any]) -> common_pb2.Error | None:
    """One item's change; its error, in band, or None."""
    try:
        await change
    except TierlogError as error:
        return as_error(error)
    except Exception as error:  # one item failed; answer it in band
        return as_error(unexpected(error, what))
    return None


class AdminService(admin_service_pb2_grpc.AdminServiceServicer):
    def __init__(
        self,
        partitions: Partitions[ReplicaManager],
        changes: TopicChanges,
        assignment: AssignmentUpdates,
    ):
        self.partitions = partitions
        self.changes = changes
        self.assignment = assignment
        self.topics = partitions.topics

    # -- topics -----------------------------------------------------------------------

    @at_the_edge
    async def CreateTopics(
        self, request: admin_service_pb2.CreateTopicsRequest, context: _Context
    ) -> admin_service_pb2.CreateTopicsResponse:
        results = []
        for new in request.topics:
            change = self.changes.create_topic(
                new.name,
                new.num_partitions or 1,
                new.replication_factor,
                dict(new.configs),
                validate_only=request.validate_only,
            )
            error = await _in_band("AdminService.CreateTopics", change)
            results.append(admin_service_pb2.TopicResult(name=new.name, error=error))
        return admin_service_pb2.CreateTopicsResponse(results=results)

    @at_the_edge
    async def DeleteTopics(
        self, request: admin_service_pb2.DeleteTopicsRequest, context: _Context
    ) -> admin_service_pb2.DeleteTopicsResponse:
        results = []
        for name in request.names:
            error = await _in_band("AdminService.DeleteTopics", self.changes.delete_topic(name))
            results.append(admin_service_pb2.TopicResult(name=name, error=error))
        return admin_service_pb2.DeleteTopicsResponse(results=results)

    def _leadership(self, tp: TopicPartition) -> Leadership:
        return partition_leadership(self.partitions, tp)

    @at_the_edge
    async def DescribeTopics(
        self, request: admin_service_pb2.DescribeTopicsRequest, context: _Context
    ) -> admin_service_pb2.DescribeTopicsResponse:
        names = list(request.names) or [topic.name for topic in self.topics.topics()]
        described = []
        for name in names:
            try:
                described.append(self._describe(self.topics.get(name)))
            except TierlogError as error:
                described.append(
                    admin_service_pb2.TopicDescription(name=name, error=as_error(error))
                )
        return admin_service_pb2.DescribeTopicsResponse(topics=described)

    def _describe(self, topic: Topic) -> admin_service_pb2.TopicDescription:
        partitions = []
        for p in range(topic.partition_count):
            tp = TopicPartition(topic.name, p)
            leadership = self._leadership(tp)
            entry = admin_service_pb2.PartitionDescription(
                partition=p,
                leader_id=leadership.leader_id,
                leader_epoch=leadership.leader_epoch,
                replicas=leadership.replicas,
                isr=leadership.isr,
                log_start_offset=-1,
                high_watermark=-1,
                size_bytes=-1,
                segment_count=-1,
            )
            if leadership.leader_id == self.partitions.ownership.node_id:
                try:
                    found = self.partitions.manager.get_log(tp)
                except UnknownTopicOrPartitionError:
                    pass
                else:
                    entry.log_start_offset = found.log_start_offset
                    entry.high_watermark = self.partitions.high_watermark(tp, found)
                    entry.size_bytes = found.size_bytes
                    entry.segment_count = len(found.segments)
            partitions.append(entry)
        return admin_service_pb2.TopicDescription(name=topic.name, partitions=partitions)

    @at_the_edge
    async def ListTopics(
        self, request: admin_service_pb2.ListTopicsRequest, context: _Context
    ) -> admin_service_pb2.ListTopicsResponse:
        return admin_service_pb2.ListTopicsResponse(
            topics=[
                admin_service_pb2.TopicListing(name=t.name, partition_count=t.partition_count)
                for t in self.topics.topics()
            ]
        )

    @at_the_edge
    async def CreatePartitions(
        self, request: admin_service_pb2.CreatePartitionsRequest, context: _Context
    ) -> admin_service_pb2.CreatePartitionsResponse:
        await self.changes.add_partitions(
            request.topic, request.total_count, validate_only=request.validate_only
        )
        return admin_service_pb2.CreatePartitionsResponse()

    # -- configs ----------------------------------------------------------------------

    @at_the_edge
    async def AlterConfigs(
        self, request: admin_service_pb2.AlterConfigsRequest, context: _Context
    ) -> admin_service_pb2.AlterConfigsResponse:
        await self.changes.alter_configs(
            request.topic,
            dict(request.set_configs),
            list(request.delete_configs),
            validate_only=request.validate_only,
        )
        return admin_service_pb2.AlterConfigsResponse()

    @at_the_edge
    async def DescribeConfigs(
        self, request: admin_service_pb2.DescribeConfigsRequest, context: _Context
    ) -> admin_service_pb2.DescribeConfigsResponse:
        entries = [
            admin_service_pb2.ConfigEntry(
                name=value.name,
                value=value.value,
                source=(
                    admin_service_pb2.CONFIG_SOURCE_TOPIC
                    if value.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
                    else admin_service_pb2.CONFIG_SOURCE_DEFAULT
                ),
            )
            for value in topic_configs(self.topics.defaults, self.topics.get(request.topic).configs)
        ]
        return admin_service_pb2.DescribeConfigsResponse(entries=entries)

    # -- metadata ---------------------------------------------------------------------

    @at_the_edge
    async def Metadata(
        self, request: admin_service_pb2.MetadataRequest, context: _Context
    ) -> admin_service_pb2.MetadataResponse:
        ownership = self.partitions.ownership
        if request.brokers_only:
            names = []
        else:
            names = list(request.topics) or [topic.name for topic in self.topics.topics()]
        topics = []
        for name in names:
            try:
                topic = self.topics.get(name)
            except TierlogError as error:
                topics.append(admin_service_pb2.TopicMetadata(name=name, error=as_error(error)))
                continue
            partitions = []
            for p in range(topic.partition_count):
                leadership = self._leadership(TopicPartition(name, p))
                partitions.append(  # leader -1, no address: moving (LEADER_NOT_AVAILABLE)
                    admin_service_pb2.PartitionMetadata(
                        partition=p,
                        leader_id=leadership.leader_id,
                        leader_address=leadership.leader_address,
                        leader_epoch=leadership.leader_epoch,
                        replicas=leadership.replicas,
                        isr=leadership.isr,
                    )
                )
            topics.append(admin_service_pb2.TopicMetadata(name=name, partitions=partitions))
        return admin_service_pb2.MetadataResponse(
            cluster_id=self.partitions.manager.config.cluster_id,
            node_id=ownership.node_id,
            brokers=[
                common_pb2.Broker(node_id=broker.node_id, address=broker.address)
                for broker in ownership.brokers
            ],
            topics=topics,
            topics_per_broker=self.partitions.replicas is None,
        )

    @at_the_edge
    async def UpdateAssignment(
        self, request: admin_service_pb2.UpdateAssignmentRequest, context: _Context
    ) -> admin_service_pb2.UpdateAssignmentResponse:
        adopted = await self.assignment.push(request.document)
        return admin_service_pb2.UpdateAssignmentResponse(
            node_id=self.partitions.ownership.node_id,
            generation=self.assignment.generation,
            adopted=adopted,
        )

    # -- restarts ---------------------------------------------------------------------

    @at_the_edge
    async def PrepareRestart(
        self, request: admin_service_pb2.PrepareRestartRequest, context: _Context
    ) -> admin_service_pb2.PrepareRestartResponse:
        manager = self.partitions.manager
        ownership = self.partitions.ownership

        def flush() -> int:
            manager.flush_all()
            manager.write_checkpoints()
            return sum(manager.get_log(tp).unflushed_messages for tp in manager.partitions)

        def awaiting_upload() -> tuple[bool, int]:
            """Closed segments of tiered partitions not yet in the tier. A partition this
            broker no longer owns (a drain) is rolled first and its upload started now,
            so all of it must go; an append that raced the roll counts as waiting too.
            Every local log of a tiered topic counts, also before the uploader's first
            pass after a start has taken it in (until then none of it is known to be
            in the tier)."""
            tier = manager.tier
            if tier is None:
                return False, 0
            for tp in manager.partitions:
                if manager.get_log(tp).config.remote_storage_enable and tier.scope(tp):
                    tier.adopt(tp, manager.get_log(tp))
            if not tier.partitions:
                return False, 0
            waiting = 0
            for tp in tier.partitions:
                released = not ownership.owns(tp)
                partition_log = manager.get_log(tp)
                if released and partition_log.active_segment.size > 0:
                    partition_log.roll()
                lag = tier.upload_lag(tp).segments
                if released and lag:
                    tier.run_soon(tp)
                raced = released and partition_log.active_segment.size > 0
                waiting += lag + int(raced)
            return True, waiting

        unflushed = await asyncio.to_thread(flush)
        tier_enabled, waiting = await asyncio.to_thread(awaiting_upload)
        return admin_service_pb2.PrepareRestartResponse(
            node_id=ownership.node_id,
            unflushed_messages=unflushed,
            tier_enabled=tier_enabled,
            segments_awaiting_upload=waiting,
            safe=unflushed == 0 and waiting == 0,
        )
