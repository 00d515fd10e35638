"""A broker stopping on SIGTERM hands its leaderships over, on both stores, and a race
lost to another writer is decided again rather than leaving a partition behind."""

from __future__ import annotations

import logging

import pytest

from tests.controller.conftest import OpenStore, RivalFirst
from tierlog.controller.changes import LOGGED_ONE_BY_ONE
from tierlog.controller.controlled_shutdown import hand_over_leaderships
from tierlog.partition_state.model import PartitionState


def test_a_stopping_broker_hands_over_every_leadership_it_can(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    store.create_topic(
        "orders",
        {
            0: PartitionState.new((1, 2, 3)),  # leads: hands over to 2
            1: PartitionState.new((2, 1, 3)),  # follows: leaves the ISR
            2: PartitionState((1, 2), 1, 5, (1,)),  # the only ISR member: stays leader
        },
    )
    store.create_topic("audit", {0: PartitionState.new((3, 2))})  # not a replica

    changes = hand_over_leaderships(store, 1, live={1, 2, 3})

    again, _, _ = store_at()
    orders = again.read_topic("orders")
    assert orders == {
        0: PartitionState((1, 2, 3), 2, 1, (2, 3), 1),
        1: PartitionState((2, 1, 3), 2, 0, (2, 3), 1),
        2: PartitionState((1, 2), 1, 5, (1,), 0),
    }
    assert [(c.topic, c.partition, c.after) for c in changes] == [
        ("orders", 0, orders[0]),
        ("orders", 1, orders[1]),
    ]
    assert again.read_topic("audit") == {0: PartitionState.new((3, 2))}
    assert "controlled shutdown of broker 1" in changes[0].describe()


def test_a_hand_over_that_loses_a_race_is_decided_again_on_the_winner(
    store_at: OpenStore,
) -> None:
    """The leader's own ISR shrink lands between the read and the hand-over: the
    hand-over is refused, re-read, and made to the member that is still in sync."""
    store, _, _ = store_at()
    rival, _, _ = store_at()
    store.create_topic("orders", {0: PartitionState.new((1, 2, 3))})
    racing = RivalFirst(store, rival, "orders", 0, lambda seen: seen.with_isr((1, 3)))
    racing.armed = True

    [change] = hand_over_leaderships(racing, 1, live={1, 2, 3})

    [shrunk] = racing.rival_changes
    assert change.before == shrunk
    assert change.after == PartitionState((1, 2, 3), 3, 1, (3,), 2)
    assert store.read_topic("orders")[0] == change.after


def test_a_stopping_brokers_hand_overs_cost_a_write_per_part_not_per_partition(
    store_at: OpenStore,
) -> None:
    """2,500 partitions (three parts) of which broker 1 leads 1,250: one batch, three
    writes."""
    store, _, _ = store_at()
    rotations = ((1, 2), (2, 1))
    store.create_topic("clicks", {p: PartitionState.new(rotations[p % 2]) for p in range(2500)})
    writes = store.part_writes

    changes = hand_over_leaderships(store, 1, live={1, 2})

    assert store.part_writes - writes == 3
    assert len(changes) == 2500
    again, _, _ = store_at()
    assert all(state.leader == 2 for state in again.read_topic("clicks").values())


def test_a_large_hand_over_is_one_info_line_and_each_change_a_debug_line(
    store_at: OpenStore, caplog: pytest.LogCaptureFixture
) -> None:
    """At thousands of partitions a line per change cost the stopping broker seconds;
    a small change is still logged one line each, in the controller's words."""
    store, _, _ = store_at()
    many = LOGGED_ONE_BY_ONE + 1
    store.create_topic("clicks", {p: PartitionState.new((1, 2)) for p in range(many)})
    store.create_topic("audit", {0: PartitionState.new((1, 2))})

    with caplog.at_level(logging.INFO, logger="tierlog.controller"):
        hand_over_leaderships(store, 1, live={1, 2})

    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert sorted(infos) == [
        "Elected leader 2 for partition audit-0 in leader epoch 1 (was leader 1; ISR "
        "[1, 2] -> [2]): controlled shutdown of broker 1",
        f"Wrote {many} change(s) of topic clicks's partitions in one batch (controlled "
        "shutdown of broker 1); 0 lost to a newer partition epoch and decided again; each "
        "is logged at DEBUG",
    ]
    debugs = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert debugs == []  # not asked for
    caplog.clear()
    store.create_topic("more", {p: PartitionState.new((1, 2)) for p in range(many)})
    with caplog.at_level(logging.DEBUG, logger="tierlog.controller"):
        hand_over_leaderships(store, 1, live={1, 2})
    assert (
        sum("Elected leader 2 for partition more-" in r.getMessage() for r in caplog.records)
        == many
    )
