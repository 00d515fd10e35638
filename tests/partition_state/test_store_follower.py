"""A view of the store kept by reading what changed (``StoreFollower``), on both stores:
changes made through any store object are read, and only theirs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from tierlog.partition_state.change_journal import ChangeCursor, changes_after
from tierlog.partition_state.model import PartitionState
from tierlog.partition_state.store import PartitionStateStore
from tierlog.partition_state.store_follower import StoreFollower, StoreView

OpenStore = Callable[..., tuple[PartitionStateStore, str, str]]
WAIT_S = 10.0  # a watch event on loopback takes milliseconds


def _refresh_until(follower: StoreFollower, seen: Callable[[StoreView], bool]) -> StoreView:
    """Refresh until ``seen``: another store object's change reaches a Kubernetes
    store's journal through its watch, a moment after the write."""
    deadline = time.monotonic() + WAIT_S
    while not seen(view := follower.refresh()):
        assert time.monotonic() < deadline, "the change never reached the follower"
    return view


def test_changes_through_another_store_object_are_read_and_only_those(
    store_at: OpenStore,
) -> None:
    store, _, _ = store_at()
    writer, _, _ = store_at()
    store.create_topic("orders", {0: PartitionState.new((1, 2))})
    store.create_topic("payments", {0: PartitionState.new((1, 2))})
    follower = StoreFollower(store)
    first = follower.refresh()
    assert first.changed is None
    assert set(first.topics) == {"orders", "payments"}

    moved = writer.alter_partition("orders", 0, 0, PartitionState((1, 2), 2, 1, (2,)))
    view = _refresh_until(follower, lambda v: v.topics["orders"][0][0] == moved)
    assert view.changed == frozenset({"orders"})
    writer.write_topic_configs("payments", {"retention.ms": "1000"})
    view = _refresh_until(follower, lambda v: v.topics["payments"][1] != {})
    assert view.topics["payments"][1] == {"retention.ms": "1000"}
    writer.delete_topic("payments")
    view = _refresh_until(follower, lambda v: "payments" not in v.topics)
    assert set(view.topics) == {"orders"}


def test_a_change_this_store_object_made_is_read_at_the_next_refresh(
    store_at: OpenStore,
) -> None:
    """A broker that created a topic applies it at its next poll (the admin service
    polls right after): no waiting for the watch."""
    store, _, _ = store_at()
    follower = StoreFollower(store)
    follower.refresh()

    store.create_topic("orders", {0: PartitionState.new((1, 2))})

    assert "orders" in follower.refresh().topics


@pytest.mark.parametrize(
    ("since", "answer"),
    [
        (None, None),  # a first read
        (ChangeCursor("other", 5), None),  # another incarnation of the journal
        (ChangeCursor("j", 1), None),  # behind what the journal keeps
        (ChangeCursor("j", 9), None),  # ahead of it: from a journal since started afresh
        (ChangeCursor("j", 2), {"a", "b"}),
        (ChangeCursor("j", 3), {"b"}),
        (ChangeCursor("j", 4), set()),
    ],
)
def test_a_reader_the_journal_cannot_answer_reads_everything(
    since: ChangeCursor | None, answer: set[str] | None
) -> None:
    kept = [(3, "a"), (4, "b")]
    changes = changes_after(since, "j", 4, kept, oldest_kept=3)
    assert changes.cursor == ChangeCursor("j", 4)
    assert changes.topics == answer


def test_a_watcher_is_told_of_another_store_objects_change(store_at: OpenStore) -> None:
    """``watch_changes``: a reader is woken by a write through any store object (on
    Kubernetes, once the watch brought it), and a refresh then finds it."""
    store, _, _ = store_at()
    writer, _, _ = store_at()
    store.create_topic("orders", {0: PartitionState.new((1, 2))})
    follower = StoreFollower(store)
    follower.refresh()  # starts a Kubernetes store's watch
    told = threading.Event()
    stop = store.watch_changes(told.set)
    try:
        writer.alter_partition("orders", 0, 0, PartitionState((1, 2), 2, 1, (2,)))
        assert told.wait(WAIT_S), "the watcher was never told"
        assert _refresh_until(follower, lambda view: view.changed == frozenset({"orders"}))
    finally:
        stop()
    told.clear()
    writer.alter_partition("orders", 0, 1, PartitionState((1, 2), 1, 2, (1,)))
    _refresh_until(follower, lambda view: view.changed == frozenset({"orders"}))
    assert not told.is_set(), "told after its stop"
