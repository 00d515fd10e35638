"""Topic administration and metadata: ``tierlog.v1.AdminService``.

Topic changes go to the topic store first or last so that a crash in between leaves
something start-up repairs: a created topic is stored, then its logs are created (the
next start creates any that are missing); a deleted topic loses its logs, then its
entry (a partition left on disk is adopted again at the next start, never lost
silently). A create or a growth that fails part way (a full disk) is undone: the
logs made so far go, then the entry (or the old partition count comes back), so a
failed create is not listed and its name is free. Changes run one at a time, in a
thread, under one lock.

Calls about many topics answer each in its own result with an ``Error``; calls about
one topic fail with a status, like the data plane.

Without replication each partition has one owner: it is the partition's leader, its only
replica and its whole ISR, at leader epoch 0, and a topic asking for more replicas than
one is refused with INVALID_REPLICATION_FACTOR. With replication, topic changes are made
in the partition-state store (``replication.topic_changes``) and every broker applies
them from there, this one before it answers; Metadata reports the store's leaders,
leader epochs, replicas and ISRs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import grpc

from tierlog.api.errors import InvalidReplicationFactorError
from tierlog.api.v1 import admin_service_pb2, admin_service_pb2_grpc, common_pb2
from tierlog.broker.partitions import Partitions
from tierlog.broker.topics import Topic
from tierlog.broker.watch import AppendWatch
from tierlog.replication import topic_changes
from tierlog.replication.leadership import partition_leadership
from tierlog.replication.replica_manager import Leadership, ReplicaManager
from tierlog.sidecar.assignment_updates import AssignmentUpdates
from tierlog.sidecar.status import as_error, at_the_edge, unexpected
from tierlog.storage.errors import TierlogError, UnknownTopicOrPartitionError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["AdminService"]

log = logging.getLogger(__name__)

_Context = grpc.aio.ServicerContext[Any, Any]

# A CreateTopics replication factor that asks for the broker's default.replication.factor:
# Kafka's -1, and proto3's unset 0.
_DEFAULT_REPLICATION_FACTORS = (0, -1)


class AdminService(admin_service_pb2_grpc.AdminServiceServicer):
    def __init__(
        self,
        partitions: Partitions[ReplicaManager],
        watch: AppendWatch,
        assignment: AssignmentUpdates,
        *,
        default_replication_factor: int = 1,
    ):
        self.partitions = partitions
        self.watch = watch
        self.assignment = assignment
        self.default_replication_factor = default_replication_factor
        self.topics = partitions.topics
        self._changes = asyncio.Lock()

    async def _change(self, what: str, change: Any, *args: Any) -> common_pb2.Error | None:
        """Run one blocking change under the lock (``args[0]``: the topic); its error, in
        band, or None. A refusal is logged too: the operator sees why a topic is missing."""
        try:
            async with self._changes:
                await asyncio.to_thread(change, *args)
        except TierlogError as error:
            log.warning("%s of %r refused: %s: %s", what, args[0], error.reason, error)
            return as_error(error)
        except Exception as error:  # one item failed; answer it in band
            return as_error(unexpected(error, what))
        return None

    # -- topics -----------------------------------------------------------------------

    @at_the_edge
    async def CreateTopics(
        self, request: admin_service_pb2.CreateTopicsRequest, context: _Context
    ) -> admin_service_pb2.CreateTopicsResponse:
        results = []
        replicated = self.partitions.replicas is not None
        for new in request.topics:
            count = new.num_partitions or 1
            error = await self._change(
                "AdminService.CreateTopics",
                self._create_replicated if replicated else self._create,
                new.name,
                count,
                new.replication_factor,
                dict(new.configs),
                request.validate_only,
            )
            results.append(admin_service_pb2.TopicResult(name=new.name, error=error))
        await self._caught_up_with_the_store()
        return admin_service_pb2.CreateTopicsResponse(results=results)

    def _create(
        self,
        name: str,
        count: int,
        replication_factor: int,
        configs: dict[str, str],
        validate_only: bool,
    ) -> None:
        self._check_replication_factor(replication_factor)
        if validate_only:
            self.topics.validate_new(name, count, configs)
            return
        created = self.topics.create(name, count, configs)
        self._ensure_logs_or_undo(created, lambda: self._delete(name))

    def _create_replicated(
        self,
        name: str,
        count: int,
        replication_factor: int,
        configs: dict[str, str],
        validate_only: bool,
    ) -> None:
        replicas = self.partitions.replicas
        assert replicas is not None
        factor, _source = self._replication_factor(replication_factor)
        topic_changes.create_topic(
            replicas.store,
            self.topics,
            replicas.racks(),
            name,
            count,
            factor,
            configs,
            validate_only=validate_only,
        )

    async def create_internal_topic(
        self, name: str, count: int, replication_factor: int, configs: Mapping[str, str]
    ) -> None:
        """Create a topic the broker itself needs (``__consumer_offsets`` on first use)
        as CreateTopics does; TOPIC_ALREADY_EXISTS if another broker was first."""
        create = self._create if self.partitions.replicas is None else self._create_replicated
        async with self._changes:
            await asyncio.to_thread(create, name, count, replication_factor, dict(configs), False)
        await self._caught_up_with_the_store()

    async def _caught_up_with_the_store(self) -> None:
        """With replication: apply what this broker just changed in the store before
        answering, so the caller's next call here finds it."""
        if self.partitions.replicas is not None:
            await self.partitions.replicas.poll_once()

    def _replication_factor(self, requested: int) -> tuple[int, str]:
        """The factor asked for (the broker default for 0 or -1) and where it came from."""
        if requested in _DEFAULT_REPLICATION_FACTORS:
            factor, source = self.default_replication_factor, " (default.replication.factor)"
        else:
            factor, source = requested, ""
        if factor < 1:
            raise InvalidReplicationFactorError(
                f"replication factor {factor}: a partition has at least 1 replica "
                "(0 or -1 asks for the broker's default.replication.factor)"
            )
        return factor, source

    def _check_replication_factor(self, requested: int) -> None:
        """Refuse a factor this broker cannot hold: it keeps one copy of each partition."""
        factor, source = self._replication_factor(requested)
        if factor > 1:
            raise InvalidReplicationFactorError(
                f"replication factor {factor}{source}: this broker keeps one copy of each "
                "partition, on its owner; more replicas need replication, which it runs "
                "only with a partition-state store (tierlog.replication.state.dir)"
            )

    def _ensure_logs_or_undo(self, topic: Topic, undo: Callable[[], None]) -> None:
        """Create the topic's logs; when that fails part way, ``undo`` the change that
        asked for them, then raise the failure (the answer; an undo's own is logged)."""
        try:
            self.partitions.ensure_logs(topic)
        except BaseException:
            try:
                undo()
            except Exception:
                log.exception("topic %r: a failed change could not be undone", topic.name)
            raise

    def _delete_logs(self, tps: Iterable[TopicPartition]) -> None:
        manager = self.partitions.manager
        for tp in tps:
            if tp in manager.partitions:
                manager.delete_log(tp)

    @at_the_edge
    async def DeleteTopics(
        self, request: admin_service_pb2.DeleteTopicsRequest, context: _Context
    ) -> admin_service_pb2.DeleteTopicsResponse:
        results = []
        replicas = self.partitions.replicas
        delete = self._delete if replicas is None else replicas.store.delete_topic
        for name in request.names:
            error = await self._change("AdminService.DeleteTopics", delete, name)
            if error is None:  # long polls and streams waiting at its end: answer them now
                self.watch.deleted(name)
            results.append(admin_service_pb2.TopicResult(name=name, error=error))
        await self._caught_up_with_the_store()
        return admin_service_pb2.DeleteTopicsResponse(results=results)

    def _delete(self, name: str) -> None:
        self._delete_logs(self.partitions.owned(self.topics.get(name)))
        self.topics.delete(name)
        self.partitions.manager.write_checkpoints()

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
        replicas = self.partitions.replicas
        async with self._changes:
            if replicas is None:
                await asyncio.to_thread(
                    self._add_partitions, request.topic, request.total_count, request.validate_only
                )
            else:
                self.topics.add_partitions(request.topic, request.total_count, validate_only=True)
                await asyncio.to_thread(
                    topic_changes.add_partitions,
                    replicas.store,
                    replicas.racks(),
                    request.topic,
                    request.total_count,
                    validate_only=request.validate_only,
                )
        await self._caught_up_with_the_store()
        return admin_service_pb2.CreatePartitionsResponse()

    def _add_partitions(self, name: str, total: int, validate_only: bool) -> None:
        before = self.topics.get(name)
        grown = self.topics.add_partitions(name, total, validate_only=validate_only)
        if not validate_only:
            self._ensure_logs_or_undo(grown, lambda: self._shrink_back(before, grown))

    def _shrink_back(self, before: Topic, grown: Topic) -> None:
        added = self.partitions.owned(grown)
        self._delete_logs(tp for tp in added if tp.partition >= before.partition_count)
        self.topics.put(before)
        self.partitions.manager.write_checkpoints()

    # -- configs ----------------------------------------------------------------------

    @at_the_edge
    async def AlterConfigs(
        self, request: admin_service_pb2.AlterConfigsRequest, context: _Context
    ) -> admin_service_pb2.AlterConfigsResponse:
        replicas = self.partitions.replicas
        async with self._changes:
            if replicas is None:
                await asyncio.to_thread(
                    self._alter,
                    request.topic,
                    dict(request.set_configs),
                    list(request.delete_configs),
                    request.validate_only,
                )
            else:
                await asyncio.to_thread(
                    topic_changes.alter_configs,
                    replicas.store,
                    self.topics,
                    request.topic,
                    dict(request.set_configs),
                    list(request.delete_configs),
                    validate_only=request.validate_only,
                )
        await self._caught_up_with_the_store()
        return admin_service_pb2.AlterConfigsResponse()

    def _alter(
        self, name: str, set_: dict[str, str], delete: list[str], validate_only: bool
    ) -> None:
        config = self.topics.alter_configs(name, set_, delete, validate_only=validate_only)
        if validate_only:
            return
        manager = self.partitions.manager
        for tp in self.partitions.owned(self.topics.get(name)):
            if tp in manager.partitions:
                manager.get_log(tp).update_config(config)

    @at_the_edge
    async def DescribeConfigs(
        self, request: admin_service_pb2.DescribeConfigsRequest, context: _Context
    ) -> admin_service_pb2.DescribeConfigsResponse:
        topic = self.topics.get(request.topic)
        config = self.topics.log_config(topic.name)
        entries = [
            admin_service_pb2.ConfigEntry(
                name=key,
                value=value,
                source=(
                    admin_service_pb2.CONFIG_SOURCE_TOPIC
                    if key in topic.configs
                    else admin_service_pb2.CONFIG_SOURCE_DEFAULT
                ),
            )
            for key, value in sorted(config.to_properties().items())
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
