"""Transactions: ``tierlog.v1.TransactionService`` over the transaction coordinator.

InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and DescribeTransactions go to the
transactional id's coordinator (``tierlog.coordinator.transaction_coordinator``), each
creating ``__transaction_state`` on first use as FindCoordinator does. WriteTxnMarkers
is the brokers' own: a coordinator elsewhere has this broker, the partition's leader,
append a marker it built (``coordinator/txn_marker_append.py``, the path the Kafka
listener's WriteTxnMarkers takes too). VerifyTxnPartition is the brokers' own too:
the leader of a partition about to take a transactional batch asks this coordinator
whether the partition is in the producer's transaction. AddOffsetsToTxn creates
``__consumer_offsets`` as group calls do: it may be the first call to name a group.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from tierlog.api.v1 import transaction_service_pb2 as pb
from tierlog.api.v1 import transaction_service_pb2_grpc
from tierlog.coordinator.transaction_coordinator import TransactionCoordinator
from tierlog.coordinator.transaction_state import partitions_of
from tierlog.sidecar.status import at_the_edge
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["TransactionService"]

_Context = grpc.aio.ServicerContext[Any, Any]
# Appends a marker batch to a partition led here (acks=all, as the coordinator).
AppendMarker = Callable[[TopicPartition, bytes], Awaitable[None]]


class TransactionService(transaction_service_pb2_grpc.TransactionServiceServicer):
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        ensure_topic: Callable[[], Awaitable[None]],
        append_marker: AppendMarker,
        ensure_offsets_topic: Callable[[], Awaitable[None]],
    ):
        self.coordinator = coordinator
        self.ensure_topic = ensure_topic
        self.ensure_offsets_topic = ensure_offsets_topic
        self.append_marker = append_marker

    @at_the_edge
    async def InitProducerId(
        self, request: pb.TransactionServiceInitProducerIdRequest, context: _Context
    ) -> pb.TransactionServiceInitProducerIdResponse:
        await self.ensure_topic()
        producer_id, epoch = await self.coordinator.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms
        )
        return pb.TransactionServiceInitProducerIdResponse(
            producer_id=producer_id, producer_epoch=epoch
        )

    @at_the_edge
    async def AddPartitionsToTxn(
        self, request: pb.AddPartitionsToTxnRequest, context: _Context
    ) -> pb.AddPartitionsToTxnResponse:
        await self.ensure_topic()
        await self.coordinator.add_partitions(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            [TopicPartition(p.topic, p.partition) for p in request.partitions],
        )
        return pb.AddPartitionsToTxnResponse()

    @at_the_edge
    async def AddOffsetsToTxn(
        self, request: pb.AddOffsetsToTxnRequest, context: _Context
    ) -> pb.AddOffsetsToTxnResponse:
        await self.ensure_topic()
        await self.ensure_offsets_topic()  # the group's partition is named by it
        await self.coordinator.add_offsets(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.group_id,
        )
        return pb.AddOffsetsToTxnResponse()

    @at_the_edge
    async def EndTxn(self, request: pb.EndTxnRequest, context: _Context) -> pb.EndTxnResponse:
        await self.ensure_topic()
        await self.coordinator.end_transaction(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            commit=request.committed,
        )
        return pb.EndTxnResponse()

    @at_the_edge
    async def DescribeTransactions(
        self, request: pb.DescribeTransactionsRequest, context: _Context
    ) -> pb.DescribeTransactionsResponse:
        await self.ensure_topic()
        value = self.coordinator.describe(request.transactional_id)
        return pb.DescribeTransactionsResponse(
            transactional_id=request.transactional_id,
            state=value.state.kafka_name,
            producer_id=value.producer_id,
            producer_epoch=value.producer_epoch,
            transaction_timeout_ms=value.transaction_timeout_ms,
            transaction_start_time_ms=value.start_timestamp_ms,
            partitions=[
                pb.TxnPartition(topic=tp.topic, partition=tp.partition)
                for tp in sorted(partitions_of(value))
            ],
        )

    @at_the_edge
    async def WriteTxnMarkers(
        self, request: pb.WriteTxnMarkersRequest, context: _Context
    ) -> pb.WriteTxnMarkersResponse:
        tp = TopicPartition(request.topic, request.partition)
        await self.append_marker(tp, request.marker_batch)
        return pb.WriteTxnMarkersResponse()

    @at_the_edge
    async def VerifyTxnPartition(
        self, request: pb.VerifyTxnPartitionRequest, context: _Context
    ) -> pb.VerifyTxnPartitionResponse:
        self.coordinator.check_in_transaction(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            TopicPartition(request.partition.topic, request.partition.partition),
        )
        return pb.VerifyTxnPartitionResponse()
