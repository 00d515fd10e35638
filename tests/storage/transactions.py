"""Transactions written through the Log as Kafka writes them: transactional batches from
producers, COMMIT/ABORT markers from a coordinator; and what they should leave behind
(the aborted ranges, the offsets a read_committed reader sees), worked out by hand."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.storage.conftest import T0
from tierlog.storage.log import AppendInfo, AppendOrigin, Log
from tierlog.storage.records import (
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
)
from tierlog.storage.transaction_index import AbortedTxn

__all__ = ["TxnWriter", "marker_batch", "txn_batch"]


def txn_batch(producer_id: int, sequence: int, count: int, *, epoch: int = 0) -> bytes:
    records = [
        SimpleRecord(
            key=f"p{producer_id}-{sequence + i}".encode(),
            value=f"v{producer_id}-{sequence + i}".encode(),
            timestamp=T0 + sequence + i,
        )
        for i in range(count)
    ]
    return build_batch(
        records,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )


def marker_batch(
    producer_id: int, *, commit: bool, epoch: int = 0, coordinator_epoch: int = 0
) -> bytes:
    control_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    return build_end_txn_marker_batch(
        EndTransactionMarker(control_type, coordinator_epoch),
        producer_id=producer_id,
        producer_epoch=epoch,
        timestamp_ms=T0,
    )


@dataclass
class TxnWriter:
    """Drives transactions into ``log`` and keeps the expected outcome. The log stands
    for a leader alone in its ISR: each append is committed at once (the high watermark
    follows the log end), so the last stable offset waits for open transactions only."""

    log: Log
    sequences: dict[int, int] = field(default_factory=dict)
    open_txns: dict[int, int] = field(default_factory=dict)  # producer id -> first offset
    pending: dict[int, list[int]] = field(default_factory=dict)  # offsets of open txns
    aborted: list[AbortedTxn] = field(default_factory=list)  # expected index entries
    committed: list[int] = field(default_factory=list)  # data offsets read_committed sees
    plain: int = -1  # producer id of non-transactional batches

    def send(self, producer_id: int, count: int = 2) -> None:
        sequence = self.sequences.get(producer_id, 0)
        info = self._append(txn_batch(producer_id, sequence, count))
        self.sequences[producer_id] = sequence + count
        self.open_txns.setdefault(producer_id, info.first_offset)
        self.pending.setdefault(producer_id, []).extend(
            range(info.first_offset, info.last_offset + 1)
        )

    def send_plain(self, count: int = 1) -> None:
        records = [SimpleRecord(key=b"k", value=b"plain", timestamp=T0) for _ in range(count)]
        info = self._append(build_batch(records))
        self.committed.extend(range(info.first_offset, info.last_offset + 1))

    def end(self, producer_id: int, *, commit: bool) -> None:
        info = self._append(marker_batch(producer_id, commit=commit), AppendOrigin.COORDINATOR)
        first = self.open_txns.pop(producer_id, None)
        offsets = self.pending.pop(producer_id, [])
        if first is None:
            return
        if commit:
            self.committed.extend(offsets)
            return
        others = [offset for pid, offset in self.open_txns.items() if pid != producer_id]
        last_stable = min(others) if others else info.last_offset + 1
        self.aborted.append(AbortedTxn(producer_id, first, info.first_offset, last_stable))

    def _append(self, data: bytes, origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendInfo:
        info = self.log.append(data, origin=origin)
        self.log.update_high_watermark(self.log.log_end_offset)
        return info

    @property
    def last_stable_offset(self) -> int:
        return min(self.open_txns.values(), default=self.log.log_end_offset)

    def overlapping(self, start: int, end: int) -> set[AbortedTxn]:
        return {txn for txn in self.aborted if txn.overlaps(start, end)}
