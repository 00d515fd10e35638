"""Which brokers are alive, judged by the controller's own clock.

A broker is alive while its lease keeps changing. The controller never compares the
holder's ``renewed_at`` with its own clock (the two clocks may disagree by more than a
lease): like client-go's leader election, it remembers when, by its monotonic clock, it
last saw each lease record change (holder, ``renewed_at`` or broker epoch), and calls
the lease expired once the lease's ``duration_s`` has passed since then with no change.

A lease seen for the first time counts from that moment, so a controller that just took
over gives every broker one full lease before fencing it; a broker with no lease is not
alive, nor one whose lease was given up at the end of its controlled shutdown
(``BrokerLease.released``): it said so through the store, so no clock is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tierlog.partition_state.model import BrokerLease

__all__ = ["Liveness"]


@dataclass(frozen=True)
class _Sighting:
    record: tuple[str, float, int]  # holder, renewed_at, broker_epoch
    changed_at: float  # the controller's clock when the record last changed


class Liveness:
    def __init__(self) -> None:
        self._sightings: dict[int, _Sighting] = {}

    def observe(self, leases: Mapping[int, BrokerLease], now: float) -> frozenset[int]:
        """Note the leases read at ``now`` (the controller's monotonic clock); the
        brokers whose lease changed less than its duration ago and was not given up."""
        sightings = {}
        for broker, lease in leases.items():
            record = (lease.holder, lease.renewed_at, lease.broker_epoch)
            sighting = self._sightings.get(broker)
            if sighting is None or sighting.record != record:
                sighting = _Sighting(record, now)
            sightings[broker] = sighting
        self._sightings = sightings  # a lease that vanished is forgotten
        return frozenset(
            broker
            for broker, sighting in sightings.items()
            if not leases[broker].released and now - sighting.changed_at < leases[broker].duration_s
        )
