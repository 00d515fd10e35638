"""A transaction marker appended on the partition's leader: the leader's half of Kafka's
WriteTxnMarkers, whoever sent it.

Three callers, one path: this broker's transaction coordinator (``MarkerRouter``, when it
leads the partition), another broker's coordinator (gRPC ``TransactionService.WriteTxnMarkers``)
and an operator's ``kafka-transactions abort`` (Kafka's WriteTxnMarkers, KIP-664). The
marker goes through the produce path with acks=all as ``AppendOrigin.COORDINATOR``, the
only origin allowed control batches, so the log makes its checks (a coordinator epoch
below the partition's last is TRANSACTION_COORDINATOR_FENCED, a producer epoch below its
last INVALID_PRODUCER_EPOCH) and ends the producer's transaction there, as Kafka's
ReplicaManager appends it.

A marker in ``__consumer_offsets`` also ends the producer's transactional offset commits:
the group coordinator's state must be loaded first (else the load could miss the marker;
NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS, which the sender retries), and applies
or drops them after.
"""

from __future__ import annotations

from tierlog.api.errors import InvalidRequestError
from tierlog.coordinator.coordinator import Append, GroupCoordinator
from tierlog.coordinator.offsets_topic import OFFSETS_TOPIC
from tierlog.storage.records import iter_batches, read_end_txn_marker
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["TxnMarkerAppender"]


class TxnMarkerAppender:
    def __init__(self, append_as_coordinator: Append, groups: GroupCoordinator) -> None:
        # An acks=all append as AppendOrigin.COORDINATOR to a partition led here.
        self.append_as_coordinator = append_as_coordinator
        self.groups = groups

    async def append(self, tp: TopicPartition, marker_batch: bytes) -> None:
        """Append ``marker_batch``, exactly one control batch, to ``tp`` (led here);
        returns once the in-sync replicas hold it."""
        headers = list(iter_batches(marker_batch))
        if len(headers) != 1 or not headers[0].is_control:
            raise InvalidRequestError("a transaction marker is exactly one control batch")
        if tp.topic == OFFSETS_TOPIC:
            self.groups.check_loaded(tp.partition)
        await self.append_as_coordinator(tp, marker_batch)
        if tp.topic == OFFSETS_TOPIC:
            marker = read_end_txn_marker(marker_batch, headers[0])
            self.groups.complete_transaction(tp.partition, headers[0].producer_id, marker.committed)
