"""Transaction markers to the partitions' leaders: the transaction coordinator's ``WriteMarker``.

A marker goes where the partition is led: appended here (as the coordinator, through the
produce path with acks=all) when this broker leads it, else sent to its leader's
``TransactionService.WriteTxnMarkers`` over one channel per broker, as a follower dials
its leader. Errors come back typed (the client's mapping of a status), so the coordinator
tells a moving leader (retry) from a deleted partition (drop the marker).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import grpc

from tierlog.api.errors import LeaderNotAvailableError
from tierlog.api.v1 import transaction_service_pb2, transaction_service_pb2_grpc
from tierlog.broker.partitions import Partitions
from tierlog.client.rpc import error_from_rpc
from tierlog.partition_state.model import NO_LEADER
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["MarkerRouter"]

# A partition led here: append a marker batch as the coordinator (acks=all).
AppendMarker = Callable[[TopicPartition, bytes], Awaitable[None]]


class MarkerRouter:
    """Writes a marker batch to a partition on its leader, here or there."""

    def __init__(
        self,
        partitions: Partitions[ReplicaManager],
        append_here: AppendMarker,
        open_channel: Callable[[str], grpc.aio.Channel],
        call_metadata: Sequence[tuple[str, str]] = (),
        timeout_s: float = 30.0,
    ) -> None:
        self.partitions = partitions
        self.append_here = append_here
        self.open_channel = open_channel
        self.call_metadata = tuple(call_metadata)
        self.timeout_s = timeout_s
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _leader(self, tp: TopicPartition) -> tuple[int, str]:
        replicas = self.partitions.replicas
        if replicas is not None:
            leadership = replicas.leadership(tp)
            if leadership.leader_id == NO_LEADER or not leadership.leader_address:
                raise LeaderNotAvailableError(f"{tp} has no leader right now")
            return leadership.leader_id, leadership.leader_address
        owner = self.partitions.ownership.owner(tp)
        if owner is None:
            raise LeaderNotAvailableError(f"{tp} is moving between brokers")
        return owner.node_id, owner.address

    async def write(self, tp: TopicPartition, marker_batch: bytes) -> None:
        self.partitions.topics.check_partition(tp.topic, tp.partition)
        leader_id, address = self._leader(tp)
        if leader_id == self.partitions.ownership.node_id:
            await self.append_here(tp, marker_batch)
            return
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self.open_channel(address)
        stub = transaction_service_pb2_grpc.TransactionServiceStub(channel)
        request = transaction_service_pb2.WriteTxnMarkersRequest(
            topic=tp.topic, partition=tp.partition, marker_batch=marker_batch
        )
        try:
            await stub.WriteTxnMarkers(request, timeout=self.timeout_s, metadata=self.call_metadata)
        except grpc.aio.AioRpcError as error:
            raise error_from_rpc(error) from None

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
