"""The leader's view of its followers follows the replica set: a reassignment adds
followers (out of sync until caught up) and removes the leaving ones, whose late fetches
are ignored rather than counted (they would be offered back into the ISR)."""

from __future__ import annotations

from pathlib import Path

from tests.storage.conftest import config, make_batch
from tierlog.controller.reassignment import complete_reassignment, start_reassignment
from tierlog.partition_state.model import PartitionState
from tierlog.replication.leader import LeaderPartition, SessionClock
from tierlog.storage.log import Log
from tierlog.storage.topic_partition import TopicPartition


def test_a_reassignment_adds_a_follower_and_drops_the_one_that_leaves(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "orders-0", config())
    log.become_leader(0)
    state = PartitionState.new((0, 1, 2))
    leader = LeaderPartition(TopicPartition("orders", 0), log, state, node_id=0, now_ms=0)
    for _ in range(3):
        log.append(make_batch(2))
    for follower in (1, 2):
        leader.record_fetch(follower, log.log_end_offset, now_ms=1)
    assert log.high_watermark == 6

    moving = start_reassignment(state, (0, 2, 3))
    leader.update_state(moving)
    assert sorted(leader.followers) == [1, 2, 3]
    assert not leader.caught_up(3)  # broker 3 has fetched nothing yet
    leader.record_fetch(3, 6, now_ms=2)
    assert leader.caught_up(3)

    done = complete_reassignment(moving.with_isr((0, 1, 2, 3)), {0, 1, 2, 3})
    assert done is not None
    leader.update_state(done)
    assert sorted(leader.followers) == [2, 3]
    leader.record_fetch(1, 6, now_ms=3)  # a fetch of broker 1 read before it was removed
    assert not leader.caught_up(1)  # not offered back into the ISR


LAG_MS = 30_000  # replica.lag.time.max.ms


def test_a_session_keeps_its_idle_followers_caught_up_until_they_leave_it(
    tmp_path: Path,
) -> None:
    """A fetch session's request names only partitions whose fetch state changed, so an
    idle partition's follower is recorded once, then kept current by its stream's clock:
    a record appended after it idled longer than replica.lag.time.max.ms must not drop
    it from the ISR before its next request. Once the partition leaves the session (the
    follower stopped fetching it), the clock no longer speaks for it."""
    log = Log.open(tmp_path / "orders-0", config())
    log.become_leader(0)
    leader = LeaderPartition(TopicPartition("orders", 0), log, PartitionState.new((0, 1, 2)), 0, 0)
    log.append(make_batch(2))
    clock = SessionClock(last_request_ms=1)
    for follower in (1, 2):
        leader.record_fetch(follower, 2, now_ms=1, clock=clock)
    clock.last_request_ms = 10 * LAG_MS  # idle requests, no record
    log.append(make_batch(1))  # appended before the followers' next request
    assert leader.out_of_sync(10 * LAG_MS + 1, LAG_MS) == ()

    leader.leave_session(2, clock)
    leader.record_fetch(1, 3, now_ms=20 * LAG_MS, clock=clock)  # it fetched the record
    clock.last_request_ms = 20 * LAG_MS  # broker 1 goes on asking; broker 2 does not
    assert leader.out_of_sync(20 * LAG_MS, LAG_MS) == (2,)
