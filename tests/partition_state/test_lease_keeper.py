"""The broker's side of liveness, on both stores: a kept lease keeps changing (in
controlled shutdown too, which it keeps saying), an incarnation that stops cleanly gives
it up, and an incarnation whose lease a newer one took is told it is fenced and stops."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tierlog.partition_state.lease_keeper import LeaseKeeper
from tierlog.partition_state.store import PartitionStateStore

OpenStore = Callable[..., tuple[PartitionStateStore, str, str]]
DURATION_S = 1.0  # the Kubernetes store keeps whole seconds
DEADLINE_S = 60.0


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll until ``condition`` holds (background work landing), failing at a generous
    deadline rather than guessing how long it takes."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def test_a_kept_lease_is_renewed_in_the_background_until_stopped(store_at: OpenStore) -> None:
    store, _, _ = store_at(time.time)
    keeper = LeaseKeeper(store, 1, "broker-1-a", DURATION_S)
    assert keeper.start() == 1
    try:
        renewed_at: set[float] = set()

        def renewed_twice() -> bool:
            renewed_at.add(store.read_leases()[1].renewed_at)
            return len(renewed_at) >= 3  # the acquisition and two renewals

        _wait_for(renewed_twice, "two renewals")
    finally:
        keeper.stop()
    assert not keeper.renewing
    lease = store.read_leases()[1]
    assert (lease.holder, lease.broker_epoch, lease.duration_s) == ("broker-1-a", 1, DURATION_S)


def test_a_lease_in_controlled_shutdown_stays_so_through_its_renewals(
    store_at: OpenStore,
) -> None:
    """A stopping broker goes on renewing its lease while it hands over and fetches on;
    a renewal must not clear the mark that keeps it out of every ISR."""
    store, _, _ = store_at(time.time)
    keeper = LeaseKeeper(store, 1, "broker-1-a", DURATION_S)
    keeper.start()
    try:
        keeper.enter_controlled_shutdown()
        marked_at = store.read_leases()[1].renewed_at
        _wait_for(lambda: store.read_leases()[1].renewed_at > marked_at, "a renewal")
        assert store.read_leases()[1].in_controlled_shutdown
    finally:
        keeper.stop()


def test_an_incarnation_whose_lease_a_newer_one_took_is_fenced_and_stops(
    store_at: OpenStore,
) -> None:
    store, _, _ = store_at(time.time)
    fenced = threading.Event()
    old = LeaseKeeper(store, 1, "broker-1-a", DURATION_S, on_fenced=fenced.set)
    new = LeaseKeeper(store, 1, "broker-1-b", DURATION_S)
    assert old.start() == 1
    try:
        assert new.start() == 2  # the restarted broker: the next broker epoch
        assert fenced.wait(DEADLINE_S), "the old incarnation's next renewal was not refused"
        _wait_for(lambda: not old.renewing, "the fenced keeper to stop by itself")
        lease = store.read_leases()[1]
        assert (lease.holder, lease.broker_epoch) == ("broker-1-b", 2)
    finally:
        old.stop()
        new.stop()


def test_a_released_lease_stops_renewing_and_is_given_up_unless_a_newer_one_holds_it(
    store_at: OpenStore,
) -> None:
    """The last step of a clean stop: no renewal after it, and the lease given up in
    the store; an incarnation a newer one fenced gives nothing up (not its lease)."""
    store, _, _ = store_at(time.time)
    keeper = LeaseKeeper(store, 1, "broker-1-a", DURATION_S)
    keeper.start()
    keeper.release()

    assert not keeper.renewing
    released = store.read_leases()[1]
    assert (released.holder, released.broker_epoch, released.released) == ("broker-1-a", 1, True)
    time.sleep(DURATION_S)  # a renewal was due meanwhile, had the keeper gone on
    assert store.read_leases()[1] == released

    fenced = LeaseKeeper(store, 2, "broker-2-a", DURATION_S)
    fenced.start()
    newer = store.acquire_lease(2, "broker-2-b", DURATION_S)
    fenced.release()  # refused (logged): broker-2-b holds it
    assert store.read_leases()[2] == newer
