"""Liveness by the controller's clock: a lease is alive while it keeps changing."""

from __future__ import annotations

from dataclasses import replace

from tierlog.controller.liveness import Liveness
from tierlog.partition_state.model import BrokerLease

DURATION_S = 10.0


def _lease(
    broker: int, renewed_at: float, holder: str = "a", epoch: int = 1
) -> dict[int, BrokerLease]:
    return {broker: BrokerLease(broker, f"broker-{broker}-{holder}", renewed_at, DURATION_S, epoch)}


def test_a_lease_that_stops_changing_expires_its_duration_after_it_was_last_seen_changing() -> None:
    liveness = Liveness()
    assert liveness.observe(_lease(1, 100.0), now=0.0) == {1}
    assert liveness.observe(_lease(1, 103.0), now=3.0) == {1}  # renewed: seen changing at 3
    assert liveness.observe(_lease(1, 103.0), now=12.9) == {1}
    assert liveness.observe(_lease(1, 103.0), now=13.0) == frozenset()  # 10 s unchanged
    assert liveness.observe(_lease(1, 103.0), now=500.0) == frozenset()


def test_the_holders_timestamps_are_never_compared_with_the_controllers_clock() -> None:
    """The broker's clock is a day behind (or its renewals carry any value): only
    whether the record changed counts, so a renewing broker stays alive."""
    liveness = Liveness()
    for tick in range(5):
        now = 1_000_000.0 + tick * 9.0  # 9 s between reads, under the 10 s duration
        assert liveness.observe(_lease(1, renewed_at=-86_400.0 + tick), now) == {1}


def test_an_expired_broker_is_alive_again_once_its_lease_changes() -> None:
    liveness = Liveness()
    liveness.observe(_lease(1, 100.0), now=0.0)
    assert liveness.observe(_lease(1, 100.0), now=20.0) == frozenset()
    # a new incarnation took the lease with the next broker epoch (same renewed_at even)
    assert liveness.observe(_lease(1, 100.0, holder="b", epoch=2), now=21.0) == {1}


def test_a_lease_first_seen_counts_from_that_moment() -> None:
    """A controller that just took over cannot know how long a lease was unchanged
    before: it gives every broker one full duration, as client-go does."""
    liveness = Liveness()
    assert liveness.observe(_lease(1, renewed_at=0.0), now=5_000.0) == {1}
    assert liveness.observe(_lease(1, renewed_at=0.0), now=5_010.0) == frozenset()


def test_a_broker_without_a_lease_is_not_alive_and_a_vanished_lease_is_forgotten() -> None:
    liveness = Liveness()
    both = {**_lease(1, 100.0), **_lease(2, 100.0)}
    assert liveness.observe(both, now=0.0) == {1, 2}
    assert liveness.observe(_lease(2, 100.0), now=1.0) == {2}
    # broker 1's lease reappears unchanged: a first sighting again, not a stale one
    assert liveness.observe(both, now=50.0) == {1}


def test_each_lease_expires_by_its_own_duration() -> None:
    liveness = Liveness()
    short = BrokerLease(3, "broker-3-a", 100.0, 2.0, 1)
    leases = {**_lease(1, 100.0), 3: short}
    liveness.observe(leases, now=0.0)
    assert liveness.observe(leases, now=2.0) == {1}


def test_a_lease_given_up_is_not_alive_at_once_until_a_new_incarnation_takes_it() -> None:
    """The end of a controlled shutdown: no duration to wait out, though the write is
    a change; the next incarnation's lease is alive from its first sighting."""
    liveness = Liveness()
    assert liveness.observe(_lease(1, 100.0), now=0.0) == {1}
    released = {1: replace(_lease(1, 101.0)[1], released=True)}
    assert liveness.observe(released, now=1.0) == frozenset()
    assert liveness.observe(_lease(1, 102.0, holder="b", epoch=2), now=2.0) == {1}
