"""Transaction markers to the partitions' leaders: the transaction coordinator's ``WriteMarker``.

A marker goes where the partition is led: appended here (as the coordinator, through the
produce path with acks=all) when this broker leads it, else sent to its leader's
``TransactionService.WriteTxnMarkers`` over the brokers' channels (``LeaderChannels``).
Errors come back typed (the client's mapping of a status), so the coordinator tells a
moving leader (retry) from a deleted partition (drop the marker).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from tierlog.api.v1 import transaction_service_pb2, transaction_service_pb2_grpc
from tierlog.client.rpc import error_from_rpc
from tierlog.sidecar.leader_channels import LeaderChannels
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["MarkerRouter"]

# A partition led here: append a marker batch as the coordinator (acks=all).
AppendMarker = Callable[[TopicPartition, bytes], Awaitable[None]]


class MarkerRouter:
    """Writes a marker batch to a partition on its leader, here or there."""

    def __init__(self, channels: LeaderChannels, append_here: AppendMarker) -> None:
        self.channels = channels
        self.append_here = append_here

    async def write(self, tp: TopicPartition, marker_batch: bytes) -> None:
        self.channels.partitions.topics.check_partition(tp.topic, tp.partition)
        leader_id, address = self.channels.leader(tp)
        if leader_id == self.channels.node_id:
            await self.append_here(tp, marker_batch)
            return
        stub = transaction_service_pb2_grpc.TransactionServiceStub(self.channels.channel(address))
        request = transaction_service_pb2.WriteTxnMarkersRequest(
            topic=tp.topic, partition=tp.partition, marker_batch=marker_batch
        )
        try:
            await stub.WriteTxnMarkers(
                request, timeout=self.channels.timeout_s, metadata=self.channels.call_metadata
            )
        except grpc.aio.AioRpcError as error:
            raise error_from_rpc(error) from None
