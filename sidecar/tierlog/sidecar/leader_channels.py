"""Channels from this broker to partitions' leaders: where a partition is led, and one
gRPC channel per broker address, kept open, as a follower dials its leader. The
coordinators' broker-to-broker calls (markers, transaction verification) go over them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grpc

from tierlog.api.errors import LeaderNotAvailableError
from tierlog.broker.partitions import Partitions
from tierlog.partition_state.model import NO_LEADER
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["LeaderChannels"]


class LeaderChannels:
    def __init__(
        self,
        partitions: Partitions[ReplicaManager],
        open_channel: Callable[[str], grpc.aio.Channel],
        call_metadata: Sequence[tuple[str, str]] = (),
        timeout_s: float = 30.0,
    ) -> None:
        self.partitions = partitions
        self.open_channel = open_channel
        # What every call carries (the cluster's bearer token) and its deadline.
        self.call_metadata = tuple(call_metadata)
        self.timeout_s = timeout_s
        self._channels: dict[str, grpc.aio.Channel] = {}

    @property
    def node_id(self) -> int:
        return self.partitions.ownership.node_id

    def leader(self, tp: TopicPartition) -> tuple[int, str]:
        """(node id, gRPC address) of ``tp``'s leader; LEADER_NOT_AVAILABLE when none."""
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

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self.open_channel(address)
        return channel

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
