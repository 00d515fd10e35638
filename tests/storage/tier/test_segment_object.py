from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.conftest import FakeClock, read_all_bytes
from tests.storage.tier.tiering import open_log, produce
from tests.storage.transactions import TxnWriter
from tierlog.storage.checkpoints import LEADER_EPOCH_CHECKPOINT, read_epoch_checkpoint
from tierlog.storage.errors import CorruptRecordError, KafkaStorageError
from tierlog.storage.index import OffsetIndex, TimeIndex
from tierlog.storage.producer_snapshot import decode_snapshot
from tierlog.storage.records import iter_batches
from tierlog.storage.tier.body import BodyReader
from tierlog.storage.tier.manifest import SegmentPart
from tierlog.storage.tier.segment_object import (
    decode_leader_epochs,
    encode_leader_epochs,
    epochs_covering,
    segment_object,
)
from tierlog.storage.tier.store import PinnedFile
from tierlog.storage.transaction_index import AbortedTxn, decode_entries


def test_a_segment_object_holds_the_segment_and_its_state(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path, clock)
    produce(log, 2)  # 3 records a batch: epoch 0 from offset 0
    log.become_leader(1)  # from 6
    produce(log, 3, start=2)
    log.become_leader(2)  # from 15
    produce(log, 1, start=5)  # segments [0, 12) and [12, 18)
    assert read_epoch_checkpoint(log.directory / LEADER_EPOCH_CHECKPOINT) == [
        (0, 0), (1, 6), (2, 15)
    ]  # fmt: skip
    log.flush()
    first = log.segments[0]
    content = segment_object(first)
    with BodyReader(content.body) as body:
        data = body.read(0, body.size)
    assert len(data) == content.size_bytes

    def part(which: SegmentPart) -> bytes:
        start, end = content.parts[list(SegmentPart).index(which)]
        return data[start:end]

    assert part(SegmentPart.LOG) == read_all_bytes(log)[: first.size]
    stamped = [
        (h.base_offset, h.partition_leader_epoch) for h in iter_batches(part(SegmentPart.LOG))
    ]
    assert stamped == [(0, 0), (3, 0), (6, 1), (9, 1)]  # each batch carries its leader's epoch
    assert content.body.parts[0] == PinnedFile.of(first.log.path)  # the file itself, not a copy
    assert (content.base_offset, content.end_offset) == (0, 12)
    assert content.max_timestamp == first.max_timestamp_so_far
    assert content.base_timestamp == first.log.header_at(0).header.max_timestamp  # type: ignore[union-attr]
    index_copy = tmp_path / "copy.index"
    index_copy.write_bytes(part(SegmentPart.OFFSET_INDEX))
    entries = OffsetIndex(index_copy, 0, 1 << 20, writable=False)
    assert entries.entries == first.offset_index.entries > 0
    time_copy = tmp_path / "copy.timeindex"
    time_copy.write_bytes(part(SegmentPart.TIME_INDEX))
    assert TimeIndex(time_copy, 0, 1 << 20, writable=False).last_entry() == (
        first.time_index.last_entry()
    )
    assert decode_snapshot(part(SegmentPart.PRODUCER_SNAPSHOT)) == []  # no idempotent ones
    assert decode_leader_epochs(part(SegmentPart.LEADER_EPOCHS)) == [(0, 0), (1, 6)]


def test_the_active_segment_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path, FakeClock())
    produce(log, 2)
    log.active_segment.log.path.open("ab").write(b"\0" * 10)  # preallocated-like tail
    with pytest.raises(KafkaStorageError):
        segment_object(log.active_segment)
    log.close()


def test_epochs_covering_a_range() -> None:
    entries = [(0, 0), (3, 10), (4, 20), (7, 35)]
    assert epochs_covering(entries, 12, 30) == [(3, 10), (4, 20)]
    assert epochs_covering(entries, 10, 11) == [(3, 10)]
    assert epochs_covering(entries, 40, 50) == [(7, 35)]
    assert epochs_covering([], 0, 5) == []


def test_leader_epochs_round_trip_and_reject_garbage() -> None:
    entries = [(0, 0), (5, 1234)]
    assert decode_leader_epochs(encode_leader_epochs(entries)) == entries
    assert decode_leader_epochs(b"") == []
    for bad in (b"1\n0\n", b"0\n2\n1 2\n", b"0\nx\n", b"\xff"):
        with pytest.raises(CorruptRecordError):
            decode_leader_epochs(bad)


def test_a_segment_object_carries_the_transaction_index(tmp_path: Path) -> None:
    log = open_log(tmp_path, FakeClock())
    txns = TxnWriter(log)
    txns.send(1, 2)
    txns.send(2, 2)
    txns.end(1, commit=False)
    txns.end(2, commit=True)
    log.roll()
    (segment,) = log.segments[:-1]
    content = segment_object(segment)
    with BodyReader(content.body) as body:
        data = body.read(0, body.size)
    start, end = content.parts[list(SegmentPart).index(SegmentPart.TXN_INDEX)]
    assert data[start:end] == segment.txn_index.path.read_bytes()
    assert decode_entries(data[start:end]) == txns.aborted == [AbortedTxn(1, 0, 4, 2)]
    assert end == content.size_bytes  # the last part
