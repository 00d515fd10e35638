"""kopf handlers: thin. Each runs one pass (``reconcile.py``, ``topic_reconcile.py``),
writes the status it returns, posts its events, and counts and times itself. A pass that
raises writes Degraded (``ReconcileFailed``) and raises on, so kopf retries it and counts
the failure; events of a lasting state are posted when it begins (``events.py``).

Passes run on every change and on a timer (changes on the brokers, a pod turning ready,
a sidecar becoming safe, are not events on our objects), one at a time per object. A
cluster's deletion waits for its finalizer: the tier's data is deleted only when its
``deletionPolicy`` says ``Delete``, once its brokers have stopped (``cluster_deletion.py``).
A topic's deletion waits for its finalizer until the brokers deleted the topic
(``topic_deletion.py``). A cluster with replication has its controller run by a daemon
(``partition_controller.py``) for as long as it exists and this operator is active.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from tierlog.operator.cluster_deletion import delete_cluster
from tierlog.operator.config import OperatorConfig
from tierlog.operator.crds import GROUP, VERSION
from tierlog.operator.events import Event, to_post
from tierlog.operator.kube import Kube, TierlogCluster, TierlogTopic
from tierlog.operator.metrics import OperatorMetrics
from tierlog.operator.partition_controller import cluster_controller, run_controller
from tierlog.operator.reconcile import Pass, failed_status, reconcile_cluster
from tierlog.operator.spec import ClusterSpec
from tierlog.operator.topic_deletion import delete_topic
from tierlog.operator.topic_reconcile import reconcile_topic

__all__ = ["RESYNC_S", "register"]

log = logging.getLogger("tierlog.operator")

RESYNC_S = 2.0  # how often a pass runs without a change (rolling, draining, topics)
_CLUSTERS = "tierlogclusters"
_TOPICS = "tierlogtopics"


def _lock(memo: Any) -> asyncio.Lock:
    """One pass at a time per object (changes and the timer would otherwise overlap)."""
    if "lock" not in memo:
        memo["lock"] = asyncio.Lock()
    lock: asyncio.Lock = memo["lock"]
    return lock


def _post(body: kopf.Body, memo: Any, events: list[Event]) -> None:
    """Post ``events``, those of a lasting state only when it begins (``memo``: the
    object's, which keeps what stood at its last pass)."""
    fresh, memo["standing"] = to_post(events, memo.get("standing", frozenset()))
    for event in fresh:
        kind = "Warning" if event.warning else "Normal"
        kopf.event(body, type=kind, reason=event.reason, message=event.message)


async def _write_failure(kube: Kube, resource: Any, body: kopf.Body, error: Exception) -> None:
    """Degraded, saying why the pass failed; a status the server refuses too is logged."""
    try:
        await kube.patch_status(
            resource,
            body.metadata.namespace or "",
            body.metadata.name or "",
            failed_status(body, error),
            body.status,
        )
    except Exception as unwritten:
        log.warning("cannot write the failure of %s: %s", body.metadata.name, unwritten)


def _replicated(spec: kopf.Spec, **_: Any) -> bool:
    return "replication" in spec


def register(
    registry: kopf.OperatorRegistry,
    kube: Kube,
    metrics: OperatorMetrics,
    config: OperatorConfig,
    *,
    topic_deletion_timeout_s: float = 300,
) -> None:
    """Register every handler on ``registry``, closing over the client, the metrics and
    the operator's ``config``; a deleted topic's brokers are retried for
    ``topic_deletion_timeout_s``."""

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """In a pod, its service account; elsewhere $KUBECONFIG or ~/.kube/config."""
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    async def run_pass(
        resource: Any,
        kind: str,
        body: kopf.Body,
        memo: Any,
        reconcile: Callable[[], Awaitable[Pass]],
    ) -> None:
        """One pass of either kind: its status written, its events posted, or Degraded."""
        async with _lock(memo):
            with metrics.timed(kind):
                try:
                    outcome = await reconcile()
                    await kube.patch_status(
                        resource,
                        body.metadata.namespace or "",
                        body.metadata.name or "",
                        outcome.status,
                        body.status,
                    )
                except Exception as error:
                    await _write_failure(kube, resource, body, error)
                    raise
                _post(body, memo, outcome.events)

    async def cluster_pass(body: kopf.Body, memo: Any, **_: Any) -> None:
        namespace = body.metadata.namespace or ""

        async def delete_pod(name: str) -> None:
            await kube.delete_pod(namespace, name)

        async def reconcile() -> Pass:
            # Before the pass: one that fails (and a cluster that never starts) still
            # expects its brokers.
            expected = ClusterSpec.from_resource(body).brokers
            metrics.cluster_brokers(namespace, body.metadata.name or "", expected)
            return await reconcile_cluster(kube, body, delete_pod, config)

        await run_pass(TierlogCluster, "TierlogCluster", body, memo, reconcile)

    async def topic_pass(body: kopf.Body, memo: Any, **_: Any) -> None:
        await run_pass(
            TierlogTopic, "TierlogTopic", body, memo, lambda: reconcile_topic(kube, body)
        )

    for resource, run in ((_CLUSTERS, cluster_pass), (_TOPICS, topic_pass)):
        for name, decorate in (
            ("create", kopf.on.create),
            ("update", kopf.on.update),
            ("resume", kopf.on.resume),
        ):
            decorate(GROUP, VERSION, resource, id=name, registry=registry, backoff=RESYNC_S)(run)
        kopf.timer(
            GROUP,
            VERSION,
            resource,
            id="resync",
            registry=registry,
            interval=RESYNC_S,
            initial_delay=RESYNC_S,
            backoff=RESYNC_S,  # a failed pass is retried as soon as any (kopf's: 60 s)
        )(run)

    @kopf.daemon(
        GROUP,
        VERSION,
        _CLUSTERS,
        id="controller",
        registry=registry,
        when=_replicated,
        cancellation_timeout=30,  # a pass under way finishes; then it is cancelled
    )
    async def partition_controller(body: kopf.Body, stopped: kopf.DaemonStopped, **_: Any) -> None:
        namespace, name = body.metadata.namespace or "", body.metadata.name or ""

        def spec() -> ClusterSpec:  # kopf keeps a daemon's body up to date
            return ClusterSpec.from_resource(body)

        controller = await asyncio.to_thread(cluster_controller, namespace, name, spec)
        metrics.controllers[namespace, name] = controller
        try:
            await run_controller(controller, f"{namespace}/{name}", stopped, spec)
        finally:  # its series go with it (another replica reports them now, or nobody)
            metrics.controllers.pop((namespace, name), None)

    @kopf.on.delete(GROUP, VERSION, _TOPICS, registry=registry, backoff=RESYNC_S)
    async def topic_deleted(body: kopf.Body, memo: Any, **_: Any) -> None:
        async with _lock(memo):
            deletion = await delete_topic(
                kube,
                body,
                give_up_after_s=topic_deletion_timeout_s,
                now=datetime.datetime.now(datetime.UTC),
            )
        _post(body, memo, deletion.events)
        if not deletion.done:  # kopf keeps the finalizer and calls again after the delay
            raise kopf.TemporaryError(f"waiting for {deletion.waiting}", delay=RESYNC_S)

    @kopf.on.delete(GROUP, VERSION, _CLUSTERS, registry=registry, backoff=RESYNC_S)
    async def cluster_deleted(body: kopf.Body, memo: Any, **_: Any) -> None:
        async with _lock(memo):
            deletion = await delete_cluster(kube, body)
        _post(body, memo, deletion.events)
        if not deletion.done:
            raise kopf.TemporaryError(f"waiting for {deletion.waiting}", delay=RESYNC_S)
        metrics.cluster_deleted(body.metadata.namespace or "", body.metadata.name or "")
