"""Loading a ``__consumer_offsets`` log written as the coordinators write it: plain
commits, transactional commits of several producers and their markers, replayed into
the same offsets the running coordinator applied (Kafka's load of pending offsets)."""

from __future__ import annotations

from pathlib import Path

from tests.storage.conftest import config
from tests.storage.transactions import marker_batch
from tierlog.coordinator.group_records import CoordinatorRecord, encode_record
from tierlog.coordinator.loader import load_offsets
from tierlog.coordinator.offset_records import OffsetCommitKey, OffsetCommitValue
from tierlog.storage.log import AppendOrigin, Log
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.topic_partition import TopicPartition

TP0, TP1, TP2 = (TopicPartition("orders", p) for p in range(3))


def _commits(offsets: dict[TopicPartition, int], producer_id: int = -1) -> bytes:
    records = [
        SimpleRecord(
            *encode_record(
                CoordinatorRecord(
                    OffsetCommitKey("g", tp.topic, tp.partition), OffsetCommitValue(offset, 0, "")
                )
            ),
            0,
        )
        for tp, offset in offsets.items()
    ]
    if producer_id < 0:
        return build_batch(records)
    return build_batch(records, producer_id=producer_id, producer_epoch=0, is_transactional=True)


def test_markers_apply_or_drop_each_producers_offsets_and_open_ones_stay_pending(
    tmp_path: Path,
) -> None:
    log = Log.open(tmp_path / "__consumer_offsets-0", config(cleanup_policy="compact"))
    as_coordinator = AppendOrigin.COORDINATOR
    log.append(_commits({TP0: 1, TP1: 1, TP2: 1}), origin=as_coordinator)
    log.append(_commits({TP0: 5}, producer_id=7), origin=as_coordinator)  # committed
    log.append(_commits({TP1: 5}, producer_id=8), origin=as_coordinator)  # aborted
    log.append(_commits({TP2: 5}, producer_id=9), origin=as_coordinator)  # still open
    log.append(_commits({TP0: 3}), origin=as_coordinator)  # plain, after 7's: it stays
    log.append(marker_batch(7, commit=True), origin=as_coordinator)
    log.append(marker_batch(8, commit=False), origin=as_coordinator)
    state = load_offsets(log, log.log_end_offset)
    assert {tp: c.offset for tp, c in state.offsets("g").items()} == {TP0: 3, TP1: 1, TP2: 1}
    assert [state.is_pending("g", tp) for tp in (TP0, TP1, TP2)] == [False, False, True]
    log.append(marker_batch(9, commit=True), origin=as_coordinator)
    state = load_offsets(log, log.log_end_offset)
    assert state.offsets("g")[TP2].offset == 5 and not state.is_pending("g", TP2)
    log.close()
