"""The controller of each replicated cluster, run by the operator on Kubernetes.

On one machine the brokers elect one of themselves to run ``tierlog.controller`` by a
file lock; on Kubernetes the operator runs it instead (Kafka's KRaft controllers are a
quorum of their own; here the API server is the quorum and the operator its client). A
kopf daemon per ``TierlogCluster`` with ``spec.replication`` runs a ``Controller`` over
the cluster's ``KubeStateStore`` (``NAME-partition-state`` and the brokers' Leases), a
pass every ``CONTROLLER_INTERVAL_S``: a broker whose Lease stops changing is fenced
after its duration and its leaderships go to live in-sync replicas.

Only the active replica runs it: kopf stops every daemon of an operator that peering
pauses, and starts them again when it resumes. A new controller starts with no sightings,
so it fences nobody before it has watched a lease for its whole duration (two
controllers at once, during a hand-over, would still be safe: every change is a
compare-and-swap on the partition epoch).
"""

from __future__ import annotations

import asyncio
import logging

import kopf
from lightkube import Client, KubeConfig

from tierlog.controller.controller import Controller
from tierlog.operator.kube import FIELD_MANAGER
from tierlog.partition_state.kube_store import KubeStateStore

__all__ = ["CONTROLLER_INTERVAL_S", "cluster_controller", "run_controller"]

log = logging.getLogger("tierlog.operator")

CONTROLLER_INTERVAL_S = 1.0  # a broker's lease lasts 9 s (broker.session.timeout.ms)


def cluster_controller(namespace: str, name: str) -> Controller:
    """A controller over the cluster's partition state, with the operator's credentials
    (the pod's service account, else ``$KUBECONFIG``)."""
    client = Client(KubeConfig.from_env(), field_manager=FIELD_MANAGER)
    return Controller(KubeStateStore(client, namespace, name))


async def run_controller(
    controller: Controller,
    where: str,
    stopped: kopf.DaemonStopped,
    interval_s: float = CONTROLLER_INTERVAL_S,
) -> None:
    """Passes until kopf stops the daemon (the cluster deleted, the operator paused or
    exiting). The store's calls block, so each pass runs in a thread; a failed pass (the
    API server unreachable) is logged and the next one tries again."""
    log.info("Controller of %s started", where)
    failing = False
    while not stopped:
        try:
            await asyncio.to_thread(controller.step)
            failing = False
        except Exception as error:
            if not failing:  # once per streak, not every second
                log.warning("Controller pass of %s failed, retrying: %s", where, error)
            failing = True
        await stopped.wait(interval_s)
    log.info("Controller of %s stopped (%s)", where, stopped.reason)
