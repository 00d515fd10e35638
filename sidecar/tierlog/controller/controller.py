"""The controller's pass over every partition, and the thread that repeats it.

``Controller.step`` reads what changed in the store (``StoreFollower``: the topics
written since the last pass, and the leases), updates liveness by the controller's own
clock, and for every partition decides its next state (``elections``) and writes it by
compare-and-swap against the partition epoch it read, a topic's decisions in one batch.
A decision depends only on the partition's state, the live brokers and the settings, so
a pass decides again only the topics that changed (and those with offline partitions),
and when brokers were fenced or came back, the partitions with a replica on one of them
(a partition with none has the same inputs as when it was last decided); every
partition when the settings changed. An idle pass reads the store's journal and leases,
and decides nothing; a broker's failure costs decisions in proportion to its replicas.
A change that loses the race is dropped: the next pass reads that topic again and
decides on what won. What is kept between passes is the view, the liveness sightings
and what the last pass decided with, all rebuilt by a controller that takes over, which
so needs no hand-off.

The store's methods block (files, HTTP), so passes run in a thread
(``ControllerThread``), one every ``interval_s``, until stopped. What the passes did is
kept for the metrics (read from another thread): the leader elections by cause, and how
many partitions the last pass left without a leader (Kafka's OfflinePartitionsCount).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Set

from tierlog.controller.changes import PartitionChange, ProposedChange, write_changes
from tierlog.controller.elections import elect, preferred_leader
from tierlog.controller.liveness import Liveness
from tierlog.controller.reassignment import complete_reassignment
from tierlog.partition_state.model import NO_LEADER, PartitionState
from tierlog.partition_state.store import Partitions, PartitionStateStore
from tierlog.partition_state.store_follower import StoreFollower
from tierlog.storage.errors import KafkaStorageError

__all__ = ["ELECTION_CAUSES", "Controller", "ControllerThread", "run_passes"]

log = logging.getLogger(__name__)


# Why a partition got a new leader (the metrics' ``cause`` label).
ELECTION_CAUSES = ("leader_fenced", "offline_recovered", "preferred", "reassignment", "unclean")


def _never_unclean(topic: str) -> bool:
    return False  # Kafka's default for unclean.leader.election.enable


class Controller:
    def __init__(
        self,
        store: PartitionStateStore,
        unclean_for: Callable[[str], bool] = _never_unclean,
        clock: Callable[[], float] = time.monotonic,
        *,
        preferred_leaders: bool = True,
        broker: int | None = None,
    ) -> None:
        """``unclean_for(topic)`` is the topic's ``unclean.leader.election.enable``;
        ``clock`` is monotonic; ``preferred_leaders`` is Kafka's
        ``auto.leader.rebalance.enable``. ``broker``: the broker this controller runs in,
        when every broker runs one; it decides only while it is the lowest broker id it
        sees alive (None: the only controller, as the operator's)."""
        self._store = store
        self._follower = StoreFollower(store)
        self._broker = broker
        self._unclean_for = unclean_for
        self._clock = clock
        self.preferred_leaders = preferred_leaders  # may change between passes
        self._liveness = Liveness()
        self.live: frozenset[int] = frozenset()
        # Brokers whose current incarnation started on a formatted log dir (their leases
        # say so): no offline partition is led by one of them from its ISR.
        self._logs_lost: frozenset[int] = frozenset()
        # Every cause there from the start: the metrics thread copies it while passes add.
        self.elections = dict.fromkeys(ELECTION_CAUSES, 0)
        self.offline_partitions = 0  # as the last pass left them
        self._offline: dict[str, int] = {}  # by topic, as its last decision left it
        # What the last pass decided every topic with (None: not every topic decided).
        self._decided_with: tuple[frozenset[int], bool] | None = None
        self._undecided: set[str] = set()  # a change lost or failed: decide again
        self.decided_partitions = 0  # by the last pass

    def close(self) -> None:
        """Release what the store runs beside its calls (on Kubernetes, its watch): the
        operator's daemon of a deleted cluster ends."""
        self._store.close()

    def step(self) -> list[PartitionChange]:
        """One pass: every change that landed."""
        view = self._follower.refresh(also=self._undecided)
        live = self._liveness.observe(view.leases, self._clock())
        _log_liveness(self.live, live)
        self.live = live
        self._logs_lost = frozenset(b for b, lease in view.leases.items() if lease.logs_lost)
        changes: list[PartitionChange] = []
        if self._broker is not None and self._broker != min(live, default=self._broker):
            # Another broker decides (safe either way: every change is a compare-and-swap,
            # but two deciders with views a moment apart undo each other's elections).
            self.offline_partitions = 0
            self._decided_with = None
            return changes
        settings = (live, self.preferred_leaders)
        # The topics whose every partition is decided, and the brokers whose liveness
        # moved since the last pass: every other topic's partitions with a replica on
        # one of those are decided too (the others stand as the last pass left them).
        whole: set[str] = set(view.topics)
        moved: frozenset[int] = frozenset()
        if view.changed is not None and self._decided_with is not None:
            last_live, last_preferred = self._decided_with
            if last_preferred == self.preferred_leaders:
                # Topics with offline partitions too: whether their election may be
                # unclean is ``unclean_for``'s, which may change without the store (the
                # operator reads the cluster's spec).
                offline = {topic for topic, count in self._offline.items() if count}
                whole = {*view.changed, *self._undecided, *offline}
                moved = last_live ^ live
        self._undecided = set()
        self.decided_partitions = 0
        for topic in sorted(set(view.topics) if moved else whole):
            if topic not in view.topics:  # deleted
                continue
            only = None if topic in whole else moved
            try:
                changes.extend(self._step_topic(topic, view.topics[topic][0], only))
            except KafkaStorageError as error:  # one unwritable topic stalls no other
                log.error("No decision for topic %s in this pass: %s", topic, error)
                self._undecided.add(topic)
        self._decided_with = settings
        self._offline = {t: n for t, n in self._offline.items() if t in view.topics}
        self.offline_partitions = sum(self._offline.values())
        return changes

    def _step_topic(
        self, topic: str, partitions: Partitions, only: Set[int] | None
    ) -> list[PartitionChange]:
        """Decide every partition of the topic as last read (``only``: those with a
        replica among these brokers), and write the decisions in one batch
        (``write_changes``)."""
        unclean: bool | None = None  # read once a partition needs it (a store read)
        proposed = []
        kinds: dict[int, str] = {}  # each proposed change's ``ELECTION_CAUSES`` entry
        for partition, state in sorted(partitions.items()):
            if only is not None and only.isdisjoint(state.replicas):
                continue
            self.decided_partitions += 1
            if unclean is None and not self.live & set(state.isr):
                unclean = self._unclean_for(topic)
            after = self._decide(state, bool(unclean))
            if after is not None:
                kinds[partition], cause = _cause(state, after, self.live)
                proposed.append(ProposedChange(partition, state, after, cause))
        changes = write_changes(self._store, topic, proposed)
        if len(changes) < len(proposed):  # lost to another change, or deleted
            self._undecided.add(topic)
        for change in changes:
            if change.after.leader not in (change.before.leader, NO_LEADER):
                self.elections[kinds[change.partition]] += 1
        after_pass = {**partitions, **{change.partition: change.after for change in changes}}
        self._offline[topic] = sum(state.leader == NO_LEADER for state in after_pass.values())
        return changes

    def _decide(self, state: PartitionState, unclean: bool) -> PartitionState | None:
        """The elections, then a reassignment whose target is in sync completed, in one
        change (``None``: nothing to change)."""
        after = elect(state, self.live, unclean, self._logs_lost) or state
        if self.preferred_leaders:
            after = preferred_leader(after, self.live) or after
        after = complete_reassignment(after, self.live) or after
        # Each step gives None when it changes nothing, so an unchanged state is the same
        # object (most partitions of most passes): no field-by-field comparison.
        return None if after is state or after == state else after


def _cause(before: PartitionState, after: PartitionState, live: Set[int]) -> tuple[str, str]:
    """Why the partition changed: one of ``ELECTION_CAUSES``, and words for the log line."""
    if after.replicas != before.replicas and not after.reassigning:
        moved = f"reassignment to replicas {list(after.replicas)} completed"
        return "reassignment", moved
    if after.leader not in (before.leader, NO_LEADER) and after.leader not in before.isr:
        return (
            "unclean",
            "unclean leader election (unclean.leader.election.enable): records may be lost",
        )
    if before.leader == NO_LEADER:
        return "offline_recovered", f"in-sync replica {after.leader} is alive again"
    if after.leader != before.leader and before.leader in live:
        return "preferred", "preferred leader election"
    # Left: brokers fenced, the leader among them or only followers (an ISR change, not
    # an election, whose kind nothing counts).
    fenced = sorted({*before.isr, before.leader} - {NO_LEADER} - live)
    return "leader_fenced", f"broker(s) {fenced} fenced (lease expired or given up)"


def _log_liveness(before: Set[int], after: Set[int]) -> None:
    if before - after:
        fenced = sorted(before - after)
        log.info("Fenced broker(s) %s: lease unchanged for its duration or given up", fenced)
    if after - before:
        log.info("Unfenced broker(s) %s: lease held and changing", sorted(after - before))


def run_passes(controller: Controller, interval_s: float, stopping: threading.Event) -> None:
    """Run a pass every ``interval_s`` until ``stopping`` is set. A failed pass (the
    store unreachable, say) is logged and the next one tries again: the controller must
    outlive a store's bad minute."""
    while not stopping.is_set():
        try:
            controller.step()
        except Exception:
            log.exception("Controller pass failed; retrying in %.1f s", interval_s)
        stopping.wait(interval_s)


class ControllerThread:
    """``run_passes`` in a daemon thread, stopped cleanly by ``stop``."""

    def __init__(self, controller: Controller, interval_s: float) -> None:
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=run_passes,
            args=(controller, interval_s, self._stopping),
            name="tierlog-controller",
            daemon=True,
        )

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Finish the pass under way (if any) and return once the thread has ended."""
        self._stopping.set()
        self._thread.join(timeout_s)
