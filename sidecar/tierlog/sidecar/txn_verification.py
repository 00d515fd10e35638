"""Transaction verification asked of another broker: the transaction coordinator's
``VerifyElsewhere`` (KIP-890 part 1, Kafka's AddPartitionsToTxn v4 with verifyOnly).

The leader of a partition about to take a transactional batch that opens a transaction
asks the broker leading the transactional id's ``__transaction_state`` partition
(``TransactionService.VerifyTxnPartition``, answered by ``check_in_transaction``) over the
brokers' channels. Errors come back typed; the coordinator maps them as Kafka's leader
does. A broker that does not serve the call yet (a cluster being upgraded) is not asked:
Kafka's leader also appends unverified when the coordinator's version cannot verify.
"""

from __future__ import annotations

import logging

import grpc

from tierlog.api.errors import NotCoordinatorError
from tierlog.api.v1 import transaction_service_pb2, transaction_service_pb2_grpc
from tierlog.client.rpc import error_from_rpc
from tierlog.coordinator.transaction_topic import TRANSACTION_STATE_TOPIC
from tierlog.sidecar.leader_channels import LeaderChannels
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["RemoteVerifier"]

log = logging.getLogger(__name__)


class RemoteVerifier:
    def __init__(self, channels: LeaderChannels) -> None:
        self.channels = channels

    async def verify(
        self,
        coordinator_partition: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        tp: TopicPartition,
    ) -> None:
        state_tp = TopicPartition(TRANSACTION_STATE_TOPIC, coordinator_partition)
        leader_id, address = self.channels.leader(state_tp)
        if leader_id == self.channels.node_id:  # led here, its coordinator not loaded yet
            raise NotCoordinatorError(f"{state_tp} is not loaded here yet")
        stub = transaction_service_pb2_grpc.TransactionServiceStub(self.channels.channel(address))
        request = transaction_service_pb2.VerifyTxnPartitionRequest(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            partition=transaction_service_pb2.TxnPartition(topic=tp.topic, partition=tp.partition),
        )
        try:
            await stub.VerifyTxnPartition(
                request, timeout=self.channels.timeout_s, metadata=self.channels.call_metadata
            )
        except grpc.aio.AioRpcError as error:
            if error.code() is grpc.StatusCode.UNIMPLEMENTED:
                log.warning(
                    "broker %d cannot verify transactions; %s appended unverified", leader_id, tp
                )
                return
            raise error_from_rpc(error) from None
