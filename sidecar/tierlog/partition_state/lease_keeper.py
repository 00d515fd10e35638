"""A broker keeps its lease: the broker's side of liveness.

``LeaseKeeper.start`` takes the broker's lease for this incarnation (the store hands out
the next broker epoch when another incarnation held it) and renews it in the background
every third of its duration, so two renewals can fail before the controller fences the
broker. A renewal refused with ``STALE_BROKER_EPOCH`` means a newer incarnation of the
broker took the lease: this one is fenced, must stop acting for the broker, and is told
through ``on_fenced``; the keeper stops. Any other failure (the store unreachable) is
logged and tried again: if it lasts, the lease expires, which is the truth. ``release``
ends a clean stop: renewals stopped, the lease is given up in the store, so the broker
counts as gone at once rather than a lease later (``PartitionStateStore.release_lease``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tierlog.api.errors import StaleBrokerEpochError
from tierlog.partition_state.store import PartitionStateStore

__all__ = ["LeaseKeeper"]

log = logging.getLogger(__name__)


class LeaseKeeper:
    def __init__(
        self,
        store: PartitionStateStore,
        broker: int,
        holder: str,
        duration_s: float,
        on_fenced: Callable[[], None] = lambda: None,
    ) -> None:
        self._store = store
        self.broker = broker
        self.holder = holder
        self.duration_s = duration_s
        self._on_fenced = on_fenced
        self.logs_lost = False  # the lease says this incarnation's logs were lost
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._renew_until_stopped, name=f"tierlog-lease-{broker}", daemon=True
        )

    def start(self, logs_lost: bool = False) -> int:
        """Take the lease and start renewing it; the broker epoch this incarnation has.
        ``logs_lost``: this incarnation's log dir was formatted at its start."""
        lease = self._store.acquire_lease(self.broker, self.holder, self.duration_s, logs_lost)
        self.logs_lost = lease.logs_lost  # as the store took it: a first start lost nothing
        log.info(
            "Broker %d holds its lease as %r in broker epoch %d",
            self.broker, self.holder, lease.broker_epoch,
        )  # fmt: skip
        self._thread.start()
        return lease.broker_epoch

    def enter_controlled_shutdown(self) -> None:
        """Say in the lease that this incarnation is stopping (renewals keep saying it):
        leaders add it to no ISR from now on (``PartitionStateStore.alter_isrs``)."""
        self._store.enter_controlled_shutdown(self.broker, self.holder)

    def logs_recovered(self) -> None:
        """Say in the lease that no partition is left that only this incarnation's lost
        logs were in sync for (``PartitionStateStore.logs_recovered``)."""
        self._store.logs_recovered(self.broker, self.holder)

    @property
    def renewing(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop renewing (the lease then expires unless a new incarnation takes it)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def release(self) -> None:
        """Stop renewing and give the lease up: this incarnation is done. A refusal or a
        store that cannot be reached is logged, not raised: a stopping broker has nothing
        left to do about it, and the lease then expires as if the process had been killed
        (``STALE_BROKER_EPOCH``: a newer incarnation holds it, which is not ours to give)."""
        self.stop()
        try:
            self._store.release_lease(self.broker, self.holder)
        except Exception:
            log.warning("Could not give broker %d's lease up", self.broker, exc_info=True)
            return
        log.info("Broker %d gave its lease up as %r", self.broker, self.holder)

    def _renew_until_stopped(self) -> None:
        while not self._stopping.wait(self.duration_s / 3):
            try:
                self._store.renew_lease(self.broker, self.holder)
            except StaleBrokerEpochError as fenced:
                log.error("Broker %d is fenced: %s", self.broker, fenced)
                self._stopping.set()
                self._on_fenced()
                return
            except Exception:
                log.warning("Could not renew broker %d's lease", self.broker, exc_info=True)
