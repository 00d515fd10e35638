"""Consumer groups' series: the groups a coordinator holds, their members, rebalances and
commits, and each group's committed offset per partition, from which PromQL makes the lag.

The lag is not computed here. A group's coordinator knows its commits, but the partitions
it consumes are led by any broker, and asking them at every scrape would make a scrape
wait on the network. Each partition's leader already exports its end
(``tierlog_log_end_offset``), so the coordinator exports the committed offset
(kafka-exporter's ``kafka_consumergroup_current_offset``, the CURRENT-OFFSET of
``kafka-consumer-groups --describe``) and Prometheus joins the two on
``(topic, partition)``: the dashboards' and ``TierlogConsumerLagHigh``'s expression,
docs/METRICS.md. The label is ``consumergroup``, kafka-exporter's, which users' lag
dashboards know, and not ``group``, a PromQL keyword.

Committed offsets are read at scrape time from the loaded partitions' states (copied in
single steps, since the event loop changes them while a metrics thread reads), so the
series of a deleted group or expired offset go with them, and those of a partition no
longer led here go when it is unloaded: one series per committed offset the broker
coordinates (what ``--describe`` lists), no member or client labels. Counters and
membership come through hooks the coordinator calls on the event loop; the scrape drops
those of groups it no longer holds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tierlog.broker.partition_series import PartitionSeries
from tierlog.coordinator.offsets_state import OffsetsState
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["GROUP_STATES", "CoordinatedGroups", "GroupMetrics"]

# A KIP-848 consumer group's states (Kafka's ConsumerGroupState, less Dead: a dead group
# is gone): each has a series from the start, 0 until a group is in it.
GROUP_STATES = ("Empty", "Assigning", "Reconciling", "Stable")
EMPTY = "Empty"  # a group with offsets and no membership known here


class CoordinatedGroups(Protocol):
    """What the metrics read of the coordinator."""

    def partition_of(self, group: str) -> int: ...

    def coordinated_partitions(self) -> Mapping[int, OffsetsState | None]:
        """The ``__consumer_offsets`` partitions led here and their states (None while
        loading); safe to call from a thread other than the event loop's."""
        ...


@dataclass(frozen=True)
class _Membership:
    partition: int  # of __consumer_offsets: the group is held while it is loaded
    state: str
    members: int


class GroupMetrics:
    """The coordinator's hooks (called on the event loop) and the collector a metrics
    thread reads. The membership code reports each group it changes:
    ``membership_changed(group, state, members)`` after a member joins, leaves or is
    fenced, or the state moves; ``rebalance_completed(group)`` when a group's epoch
    moves to a new target assignment (Kafka's ``consumer-group-rebalance-count``);
    ``group_removed(group)`` when the group is deleted or dies. A group it never
    reported is ``Empty`` with no members, as every group without membership is."""

    def __init__(self, groups: CoordinatedGroups, series: PartitionSeries) -> None:
        self.groups = groups
        self.series = series
        self._lock = threading.Lock()  # the hooks' dicts: written on the loop, pruned by scrapes
        self._commits: dict[str, int] = {}
        self._rebalances: dict[str, int] = {}
        self._membership: dict[str, _Membership] = {}

    # -- hooks ------------------------------------------------------------------------

    def offsets_committed(self, group: str, count: int) -> None:
        """``count`` offsets of ``group`` acknowledged by the log (Kafka's OffsetCommits)."""
        with self._lock:
            self._commits[group] = self._commits.get(group, 0) + count

    def rebalance_completed(self, group: str) -> None:
        with self._lock:
            self._rebalances[group] = self._rebalances.get(group, 0) + 1

    def membership_changed(self, group: str, state: str, members: int) -> None:
        membership = _Membership(self.groups.partition_of(group), state, members)
        with self._lock:
            self._membership[group] = membership

    def group_removed(self, group: str) -> None:
        with self._lock:
            self._membership.pop(group, None)

    # -- the scrape -------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        partitions = self.groups.coordinated_partitions()
        states = [state for state in partitions.values() if state is not None]
        with_offsets: set[str] = set()
        samples: list[tuple[tuple[str], TopicPartition, float]] = []
        for state in states:
            for group, offsets in state.committed().items():
                with_offsets.add(group)
                samples.extend(((group,), tp, offset.offset) for tp, offset in offsets.items())
        committed = self.series.gauge(
            "tierlog_consumergroup_committed_offset",
            "The group's committed offset of the partition (the next record it consumes)",
            ["consumergroup"],
            samples,
        )
        commits, rebalances, membership = self._live_hooks(set(partitions), with_offsets)
        live = sorted(with_offsets | set(membership))
        yield committed
        yield from _group_counts(live, membership)
        # Every group held here has its counters, from 0: increase() sees the first.
        yield _per_group(
            CounterMetricFamily(
                "tierlog_consumergroup_offset_commits_total",
                "Offsets the group committed, acknowledged by the log (Kafka's OffsetCommits)",
                labels=["consumergroup"],
            ),
            live,
            commits,
        )
        yield _per_group(
            CounterMetricFamily(
                "tierlog_consumergroup_rebalances_total",
                "Rebalances of the group completed here: its epoch moved to a new target "
                "assignment (Kafka's consumer-group-rebalance-count)",
                labels=["consumergroup"],
            ),
            live,
            rebalances,
        )

    def _live_hooks(
        self, led: set[int], with_offsets: set[str]
    ) -> tuple[dict[str, int], dict[str, int], dict[str, _Membership]]:
        """The hooks' values of the groups still held here; the others forgotten (a
        partition still loading keeps its groups: its load may be reporting them)."""
        with self._lock:
            for group in [g for g, m in self._membership.items() if m.partition not in led]:
                del self._membership[group]
            live = with_offsets | set(self._membership)
            for counts in (self._commits, self._rebalances):
                for group in [group for group in counts if group not in live]:
                    del counts[group]
            return dict(self._commits), dict(self._rebalances), dict(self._membership)


def _group_counts(live: list[str], membership: Mapping[str, _Membership]) -> Iterator[Metric]:
    by_state = dict.fromkeys(GROUP_STATES, 0)
    members = GaugeMetricFamily(
        "tierlog_consumergroup_members",
        "Members of the group (kafka-exporter's kafka_consumergroup_members)",
        labels=["consumergroup"],
    )
    for group in live:
        known = membership.get(group)
        state, count = (EMPTY, 0) if known is None else (known.state, known.members)
        by_state[state] = by_state.get(state, 0) + 1
        members.add_metric([group], count)
    groups = GaugeMetricFamily(
        "tierlog_consumergroups",
        "Consumer groups this broker coordinates, by state (Kafka's consumer-group-count)",
        labels=["state"],
    )
    for state, count in by_state.items():
        groups.add_metric([state], count)
    yield from (groups, members)


def _per_group(
    family: CounterMetricFamily, live: list[str], counts: Mapping[str, int]
) -> CounterMetricFamily:
    for group in live:
        family.add_metric([group], counts.get(group, 0))
    return family
