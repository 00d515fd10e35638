"""The controller of each replicated cluster, run by the operator on Kubernetes.

On one machine the brokers elect one of themselves to run ``tierlog.controller`` by a
file lock; on Kubernetes the operator runs it instead (Kafka's KRaft controllers are a
quorum of their own; here the API server is the quorum and the operator its client). A
kopf daemon per ``TierlogCluster`` with ``spec.replication`` runs a ``Controller`` over
the cluster's ``KubeStateStore`` (``NAME-partition-state`` and the brokers' Leases), a
pass every ``CONTROLLER_INTERVAL_S``: a broker whose Lease stops changing is fenced
after its duration and its leaderships go to live in-sync replicas.

It decides as the brokers' own controllers would: ``unclean.leader.election.enable``
per topic (its config in the store, else the cluster's ``logDefaults``, else off) and
preferred leaders as ``spec.replication.autoLeaderRebalance`` says, both read from the
cluster as it is now (the spec can change while the daemon runs). It also completes the
reassignments a scale-down (or ``tierlog partitions reassign``) started. What its passes
do is exported on the operator's metrics endpoint (``OperatorMetrics.controllers``).

Only the active replica runs it: kopf stops every daemon of an operator that peering
pauses, and starts them again when it resumes. A new controller starts with no sightings,
so it fences nobody before it has watched a lease for its whole duration (two
controllers at once, during a hand-over, would still be safe: every change is a
compare-and-swap on the partition epoch).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import kopf
from lightkube import Client, KubeConfig

from tierlog.controller.controller import Controller
from tierlog.operator.kube import FIELD_MANAGER
from tierlog.operator.spec import ClusterSpec
from tierlog.partition_state.kube_store import KubeStateStore
from tierlog.partition_state.store import PartitionStateStore
from tierlog.storage.config import LogConfig

__all__ = [
    "CONTROLLER_INTERVAL_S",
    "cluster_controller",
    "cluster_store",
    "run_controller",
    "unclean_election",
]

log = logging.getLogger("tierlog.operator")

CONTROLLER_INTERVAL_S = 1.0  # a broker's lease lasts 9 s (broker.session.timeout.ms)
UNCLEAN = "unclean.leader.election.enable"


def cluster_store(namespace: str, name: str) -> KubeStateStore:
    """The cluster's partition-state store, with the operator's credentials (the pod's
    service account, else ``$KUBECONFIG``)."""
    client = Client(KubeConfig.from_env(), field_manager=FIELD_MANAGER)
    return KubeStateStore(client, namespace, name)


def unclean_election(
    store: PartitionStateStore, spec: Callable[[], ClusterSpec]
) -> Callable[[str], bool]:
    """A topic's ``unclean.leader.election.enable``: its own config in the store over
    the cluster's ``logDefaults`` (Kafka's topic config over the broker's)."""

    def unclean_for(topic: str) -> bool:
        defaults = {k: v for k, v in spec().log_defaults.items() if k == UNCLEAN}
        cluster = LogConfig.from_properties(defaults)
        overrides = {k: v for k, v in store.read_topic_configs(topic).items() if k == UNCLEAN}
        return LogConfig.from_properties(overrides, cluster).unclean_leader_election_enable

    return unclean_for


def cluster_controller(namespace: str, name: str, spec: Callable[[], ClusterSpec]) -> Controller:
    """A controller over the cluster's partition state; ``spec`` reads the cluster now.
    Topics still in the one ConfigMap of before parts are moved out of it first."""
    store = cluster_store(namespace, name)
    adopted = store.adopt_single_config_maps()
    if adopted:
        log.info("Moved %d topics' partition state into ConfigMaps of their own", len(adopted))
    return Controller(store, unclean_election(store, spec))


def _auto_leader_rebalance(cluster: ClusterSpec) -> bool:
    return cluster.replication is None or cluster.replication.auto_leader_rebalance


async def run_controller(
    controller: Controller,
    where: str,
    stopped: kopf.DaemonStopped,
    spec: Callable[[], ClusterSpec],
    interval_s: float = CONTROLLER_INTERVAL_S,
) -> None:
    """Passes until kopf stops the daemon (the cluster deleted, the operator paused or
    exiting), each with the cluster's settings as ``spec`` reads them then. The store's
    calls block, so each pass runs in a thread; a failed pass (the API server
    unreachable) is logged and the next one tries again."""
    log.info("Controller of %s started", where)
    failing = False
    while not stopped:
        try:
            controller.preferred_leaders = _auto_leader_rebalance(spec())
            await asyncio.to_thread(controller.step)
            failing = False
        except Exception as error:
            if not failing:  # once per streak, not every second
                log.warning("Controller pass of %s failed, retrying: %s", where, error)
            failing = True
        await stopped.wait(interval_s)
    log.info("Controller of %s stopped (%s)", where, stopped.reason)
