"""Dropping aborted transactions from one fetched message, as Kafka's consumer does.

Under ``isolation.level=read_committed`` the sidecar reads only below the last stable
offset, so every transaction in a message is decided, and lists the aborted ones that
overlap the message's batches as (producer id, first offset). A producer has one
transaction open at a time, so its transactional batches from such a first offset up
to its next ABORT marker are that aborted transaction's: this filter walks the batches
in offset order, starts dropping a producer's transactional batches once it passes the
first offset of one of its aborted transactions, and stops at the producer's ABORT
marker (Kafka's ``CompletedFetch``). Control batches are never records; the consumer
skips them whatever this says.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from tierlog.storage.errors import InvalidRecordError
from tierlog.storage.records import BatchHeader, ControlRecordType, read_end_txn_marker

__all__ = ["AbortedTransactionFilter"]


class AbortedTransactionFilter:
    """The aborted transactions of one message, met batch by batch in offset order."""

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        # (first offset, producer id): the next one to start dropping is at the top.
        self._upcoming = [(first_offset, producer_id) for producer_id, first_offset in aborted]
        heapq.heapify(self._upcoming)
        self._aborting: set[int] = set()  # producers whose aborted batches are being met

    def __bool__(self) -> bool:
        """Whether any batch may be dropped (none listed: every batch is kept)."""
        return bool(self._upcoming or self._aborting)

    def drops(self, data: bytes, header: BatchHeader) -> bool:
        """Whether the batch ``header`` describes (in ``data``) is aborted data; batches
        must come in offset order, markers included."""
        producer_id = header.producer_id
        if producer_id < 0:  # not a producer's batch: never transactional
            return False
        while self._upcoming and self._upcoming[0][0] <= header.last_offset:
            self._aborting.add(heapq.heappop(self._upcoming)[1])
        if producer_id not in self._aborting:
            return False
        if header.is_control:
            if _is_abort_marker(data, header):
                self._aborting.discard(producer_id)
            return False
        return header.is_transactional


def _is_abort_marker(data: bytes, header: BatchHeader) -> bool:
    try:
        marker = read_end_txn_marker(data, header)
    except (InvalidRecordError, ValueError):  # another kind of control batch: it ends nothing
        return False
    return marker.control_type is ControlRecordType.ABORT
