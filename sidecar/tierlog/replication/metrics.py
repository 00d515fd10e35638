"""Replication's series, read at scrape time from the replica manager and the controller.

Kafka's ReplicaManager and controller metrics under Prometheus' names. A broker
reports the partitions it leads and holds replicas of, and of those it leads how many
lack in-sync replicas (all of them, under ``min.insync.replicas``, or exactly at it), the
ISR changes it has seen while leading, and how far each follower of its partitions is
behind. The broker that runs the controller reports the partitions left without a leader
and the elections it made; every other broker reports 0 for them, so a cluster's sum is
the same view from every broker (each runs a controller).

Lag is measured by the leader, from the offset each follower last fetched from, not by
the follower as Kafka's ``MaxLag`` is: a follower that is stopped, partitioned off or dead
cannot report its own lag, and that is the follower whose lag matters.

Only a broker with replication on registers this collector: one without has no ISR,
no followers and no controller, and reports none of these series rather than zeros that
would read as "all in sync".
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tierlog.controller.controller import Controller
from tierlog.replication.leader import UNKNOWN_OFFSET, LeaderPartition
from tierlog.replication.replica_manager import ReplicaManager

__all__ = ["ReplicationCollector"]


class ReplicationCollector:
    def __init__(self, replicas: ReplicaManager, controller: Controller):
        self.replicas = replicas
        self.controller = controller

    def collect(self) -> Iterator[Metric]:
        yield from self._replica_manager()
        yield from self._controller()

    def _replica_manager(self) -> Iterator[Metric]:
        replicas = self.replicas
        # Copies first: the event loop changes these dicts while the scrape reads them.
        leaders = list(replicas.leaders.values())
        states = list(replicas.states.values())
        under_replicated = under_min_isr = at_min_isr = 0
        for leader in leaders:
            isr, min_isr = len(leader.state.isr), leader.log.config.min_insync_replicas
            under_replicated += isr < len(leader.state.target_replicas)
            under_min_isr += isr < min_isr
            at_min_isr += isr == min_isr
        yield GaugeMetricFamily(
            "tierlog_leader_partitions", "Partitions this broker leads (Kafka's LeaderCount)",
            len(leaders),
        )  # fmt: skip
        yield GaugeMetricFamily(
            "tierlog_replica_partitions",
            "Partitions this broker is a replica of, leader or follower (Kafka's PartitionCount)",
            sum(replicas.node_id in state.replicas for state in states),
        )
        yield GaugeMetricFamily(
            "tierlog_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replicas",
            under_replicated,
        )
        yield GaugeMetricFamily(
            "tierlog_under_min_isr_partitions",
            "Partitions led here with fewer in-sync replicas than min.insync.replicas "
            "(acks=all produce is refused)",
            under_min_isr,
        )
        yield GaugeMetricFamily(
            "tierlog_at_min_isr_partitions",
            "Partitions led here with exactly min.insync.replicas in-sync replicas",
            at_min_isr,
        )
        yield CounterMetricFamily(
            "tierlog_isr_shrinks_total", "ISR shrinks of partitions led here", replicas.isr_shrinks
        )
        yield CounterMetricFamily(
            "tierlog_isr_expands_total", "ISR expansions of partitions led here",
            replicas.isr_expands,
        )  # fmt: skip
        yield CounterMetricFamily(
            "tierlog_unclean_recoveries_total",
            "Partitions this broker, its log dir formatted at its start and their only "
            "in-sync replica, gave to the replica holding the most (KIP-966's unclean "
            "recovery): records only its lost log held are gone",
            replicas.unclean_recoveries,
        )
        lag = GaugeMetricFamily(
            "tierlog_follower_max_lag_records",
            "Records the follower is behind this leader's log end, the most over the "
            "partitions led here",
            labels=["follower"],
        )  # fmt: skip
        for follower, records in sorted(_follower_lags(leaders).items()):
            lag.add_metric([str(follower)], records)
        yield lag

    def _controller(self) -> Iterator[Metric]:
        controller = self.controller
        yield GaugeMetricFamily(
            "tierlog_controller_offline_partitions",
            "Partitions without a leader at this broker's controller's last pass (Kafka's "
            "OfflinePartitionsCount); every broker runs a controller: take the max",
            controller.offline_partitions,
        )
        elections = CounterMetricFamily(
            "tierlog_controller_leader_elections_total",
            "Leaders this broker's controller elected (each change lands once, whichever "
            "broker's controller made it: sum them), by cause",
            labels=["cause"],
        )
        for cause, count in sorted(dict(controller.elections).items()):
            elections.add_metric([cause], count)
        yield elections


def _follower_lags(leaders: list[LeaderPartition]) -> dict[int, int]:
    """Each follower's largest lag, in records behind the leader's log end, over
    ``leaders``; a follower that has not fetched yet in its leader's epoch is left out
    (nothing is known of it until then)."""
    lags: dict[int, int] = {}
    for leader in leaders:
        end = leader.log.log_end_offset
        for follower, progress in list(leader.followers.items()):
            if follower not in leader.state.replicas or progress.log_end_offset == UNKNOWN_OFFSET:
                continue
            behind = max(0, end - progress.log_end_offset)
            lags[follower] = max(lags.get(follower, 0), behind)
    return lags
