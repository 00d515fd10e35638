"""What a log starting over at a segment end of the tier takes from it: the producers
of the snapshot there and the leader epochs below it, gathered from the segments'
objects; and a log that continues there with them holds what the original held."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.conftest import T0, FakeClock, make_records
from tierlog.storage.errors import OffsetMovedToTieredStorageError
from tierlog.storage.log import Log
from tierlog.storage.producer_snapshot import decode_snapshot, snapshot_path
from tierlog.storage.records import build_batch
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.manifest_store import load_view
from tierlog.storage.tier.tier_state import tier_state_at

from .tiering import TP, open_log, produce
from .uploads import tier_closed_segments


def idempotent_batch(producer_id: int, base_sequence: int) -> bytes:
    return build_batch(
        make_records(3, start_ts=T0, tag=f"p{producer_id}"),
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=base_sequence,
    )


@pytest.fixture
def tiered_log(tmp_path: Path) -> tuple[Log, LocalDirectoryStore]:
    """A log written in leader epochs 0, 2 and 5 by two idempotent producers, its closed
    segments (four batches each) in a local-directory tier."""
    log = open_log(tmp_path / "leader", FakeClock())
    produce(log, 6)
    log.append(idempotent_batch(7, 0))
    log.become_leader(2)
    produce(log, 5, start=6)
    log.append(idempotent_batch(8, 0))
    log.append(idempotent_batch(7, 3))
    log.become_leader(5)
    produce(log, 9, start=11)
    store = LocalDirectoryStore(tmp_path / "tier")
    tier_closed_segments(store, TP, log)
    return log, store


def test_the_state_at_a_segment_end_is_the_logs_own_there(
    tiered_log: tuple[Log, LocalDirectoryStore],
) -> None:
    log, store = tiered_log
    view = load_view(store, TP)
    ends = [segment.end_offset for segment in view.all_segments()]
    assert len(ends) >= 5
    for end in ends:
        state = tier_state_at(store, view, end)
        expected_epochs = [
            (entry.epoch, entry.start_offset)
            for entry in log.leader_epoch_cache.entries
            if entry.start_offset < end
        ]
        assert list(state.leader_epochs) == expected_epochs
        snapshot = decode_snapshot(snapshot_path(log.directory, end).read_bytes())
        assert list(state.producers) == snapshot
    assert [epoch for epoch, _start in state.leader_epochs] == [0, 2, 5]  # at the tier's end


def test_an_offset_that_ends_no_segment_of_the_tier_is_refused(
    tiered_log: tuple[Log, LocalDirectoryStore],
) -> None:
    _log, store = tiered_log
    view = load_view(store, TP)
    first = view.all_segments()[0]
    with pytest.raises(OffsetMovedToTieredStorageError):
        tier_state_at(store, view, first.end_offset - 1)  # inside a segment
    with pytest.raises(OffsetMovedToTieredStorageError):
        tier_state_at(store, view, view.end_offset + 12)  # past the tier
    assert tier_state_at(store, view, 0).leader_epochs == ()  # nothing below the log start


def test_a_log_continuing_at_a_segment_end_knows_its_producers_and_epochs(
    tiered_log: tuple[Log, LocalDirectoryStore], tmp_path: Path
) -> None:
    log, store = tiered_log
    view = load_view(store, TP)
    end = view.all_segments()[-2].end_offset  # past both producers' batches and epoch 2
    state = tier_state_at(store, view, end)
    follower = open_log(tmp_path / "follower", FakeClock())
    follower.continue_tier(0, end, state.producers, state.leader_epochs)
    assert follower.local_log_start_offset == end and follower.log_start_offset == 0
    expected = [entry for entry in log.leader_epoch_cache.entries if entry.start_offset < end]
    assert follower.leader_epoch_cache.entries == expected
    # Producer 7's last batch (sequence 3) is recognised when it is sent again.
    duplicate = follower.append(idempotent_batch(7, 3))
    assert duplicate.duplicate and duplicate.last_offset < end
    assert follower.log_end_offset == end
