"""kopf handlers: thin. Each runs one pass (``reconcile.py``, ``topic_reconcile.py``),
writes the status it returns, posts its events, and counts and times itself. A pass that
raises writes Degraded (``ReconcileFailed``), counts as a failure and is retried soon;
events of a lasting state are posted when it begins (``events.py``).

Each object's passes run in a daemon of its own, one at a time: one when it starts, one
whenever a watched change wakes it (its own spec, labels or annotations; for a cluster
also its pods, StatefulSet, ConfigMaps and topics, for a topic its cluster, and its pods
while it waits for them: ``wakeups.py``), one ``BROKER_POLL_S`` after a pass that waits
on the brokers (a sidecar becoming safe to restart, a drain) or failed, and otherwise
one every ``resync_s`` for what no watch shows. A cluster's deletion waits for its
finalizer: the tier's data is deleted only when its ``deletionPolicy`` says ``Delete``,
once its brokers have stopped (``cluster_deletion.py``). A topic's deletion waits for
its finalizer until the brokers deleted the topic (``topic_deletion.py``). A cluster
with replication has its controller run by a daemon (``partition_controller.py``) for as
long as it exists and this operator is active.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from tierlog.operator.cluster_deletion import delete_cluster
from tierlog.operator.cluster_reads import ClusterReads
from tierlog.operator.config import OperatorConfig
from tierlog.operator.crds import GROUP, VERSION
from tierlog.operator.events import Event, to_post
from tierlog.operator.kube import Kube, TierlogCluster, TierlogTopic
from tierlog.operator.metrics import OperatorMetrics
from tierlog.operator.partition_controller import cluster_controller, run_controller
from tierlog.operator.reconcile import Pass, failed_status, is_paused, reconcile_cluster
from tierlog.operator.spec import ClusterSpec
from tierlog.operator.topic_deletion import delete_topic
from tierlog.operator.topic_reconcile import reconcile_topic
from tierlog.operator.wakeups import ClusterKey, Wakeups, sleep_until_woken, woken_event
from tierlog.partition_state.kube_store import CLUSTER_LABEL

__all__ = ["BROKER_POLL_S", "RESYNC_S", "WAKER_PREFIX", "QuietWakers", "register"]

log = logging.getLogger("tierlog.operator")

RESYNC_S = 300.0  # a pass without a change: for what no watch shows (a node's zone)
BROKER_POLL_S = 2.0  # the next pass while one waits on the brokers, or after a failure
_CLUSTERS = "tierlogclusters"
_TOPICS = "tierlogtopics"
_INSTANCE = "app.kubernetes.io/instance"  # the cluster, on every object rendered for it
_BROKER_POD_LABELS = {"app.kubernetes.io/name": "tierlog", "app.kubernetes.io/component": "broker"}
_RENDERED_LABELS = {"app.kubernetes.io/managed-by": "tierlog-operator"}
_STATE_LABELS = {CLUSTER_LABEL: kopf.PRESENT}


WAKER_PREFIX = "wake-"  # the ids of the handlers that only wake passes


class QuietWakers(logging.Filter):
    """Drops kopf's "Handler ... succeeded." for the wakers, one per watch event."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith(f"Handler '{WAKER_PREFIX}") and "succeeded" in message)


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


def _cluster_key(body: kopf.Body) -> ClusterKey:
    return body.metadata.namespace or "", body.metadata.name or ""


def _topic_cluster_key(body: kopf.Body) -> ClusterKey:
    return body.metadata.namespace or "", str(body.spec.get("cluster", ""))


def _labelled_key(body: kopf.Body, label: str) -> ClusterKey:
    """The cluster an object the operator renders (or the brokers write) belongs to."""
    return body.metadata.namespace or "", body.metadata.labels.get(label, "")


def register(
    registry: kopf.OperatorRegistry,
    kube: Kube,
    metrics: OperatorMetrics,
    config: OperatorConfig,
    *,
    topic_deletion_timeout_s: float = 300,
    resync_s: float = RESYNC_S,
) -> None:
    """Register every handler on ``registry``, closing over the client, the metrics and
    the operator's ``config``; a deleted topic's brokers are retried for
    ``topic_deletion_timeout_s``; an object nothing changes is passed every ``resync_s``."""
    wakeups, cluster_reads = Wakeups(), ClusterReads(kube)

    async def rendered_changed(body: kopf.Body, **_: Any) -> None:
        wakeups.wake_cluster(_labelled_key(body, _INSTANCE))

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
    ) -> Pass:
        """One pass of either kind: its status written, its events posted, or Degraded."""
        memo["paused"] = is_paused(body)
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
                return outcome

    async def cluster_pass(body: kopf.Body, memo: Any) -> Pass:
        namespace = body.metadata.namespace or ""

        async def delete_pod(name: str) -> None:
            await kube.delete_pod(namespace, name)

        async def reconcile() -> Pass:
            # Before the pass: one that fails (and a cluster that never starts) still
            # expects its brokers.
            expected = ClusterSpec.from_resource(body).brokers
            metrics.cluster_brokers(namespace, body.metadata.name or "", expected)
            return await reconcile_cluster(kube, body, delete_pod, config)

        return await run_pass(TierlogCluster, "TierlogCluster", body, memo, reconcile)

    async def topic_pass(body: kopf.Body, memo: Any) -> Pass:
        async def reconcile() -> Pass:
            synced = memo.get("synced")
            done = await reconcile_topic(
                kube, cluster_reads, body, synced, recheck_after_s=resync_s
            )
            memo["synced"] = done.synced
            return done.outcome

        return await run_pass(TierlogTopic, "TierlogTopic", body, memo, reconcile)

    async def passes(
        memo: Any, stopped: kopf.DaemonStopped, run: Callable[[], Awaitable[Pass]]
    ) -> None:
        """An object's passes, one now and then one each time it is woken, soon while a
        pass waits on the brokers or failed, else at the resync."""
        woken, delay_s = woken_event(memo), 0.0
        while True:
            await sleep_until_woken(woken, stopped, delay_s)
            if stopped:
                return
            woken.clear()
            try:
                outcome = await run()
            except Exception as error:  # Degraded is written; the next pass comes soon
                log.warning("a pass failed and is retried in %.0f s: %s", BROKER_POLL_S, error)
                delay_s = BROKER_POLL_S
                continue
            delay_s = BROKER_POLL_S if outcome.polls_brokers else resync_s

    @kopf.daemon(GROUP, VERSION, _CLUSTERS, id="passes", registry=registry, cancellation_timeout=30)
    async def cluster_passes(
        body: kopf.Body, memo: Any, stopped: kopf.DaemonStopped, **_: Any
    ) -> None:
        key = _cluster_key(body)
        wakeups.wake_topics(key)  # a topic that waited for its cluster
        with wakeups.cluster(key, woken_event(memo)):
            await passes(memo, stopped, lambda: cluster_pass(body, memo))

    @kopf.daemon(GROUP, VERSION, _TOPICS, id="passes", registry=registry, cancellation_timeout=30)
    async def topic_passes(
        body: kopf.Body, memo: Any, stopped: kopf.DaemonStopped, **_: Any
    ) -> None:
        key, woken = _topic_cluster_key(body), woken_event(memo)
        wakeups.wake_cluster(key)  # its partitions go into the cluster's plan

        async def run() -> Pass:
            outcome = await topic_pass(body, memo)
            wakeups.topic_waits(woken, memo["synced"] is None)
            return outcome

        with wakeups.topic(key, woken):
            await passes(memo, stopped, run)

    # The wakers: async, so they run on the loop the daemons wait on (an asyncio.Event is
    # not for threads, where kopf runs plain functions).
    async def cluster_changed(body: kopf.Body, memo: Any, **_: Any) -> None:
        """Created, resumed, or its spec, labels or annotations (not its status) changed."""
        woken_event(memo).set()
        wakeups.wake_topics(_cluster_key(body))

    async def topic_changed(body: kopf.Body, memo: Any, **_: Any) -> None:
        woken_event(memo).set()
        wakeups.wake_cluster(_topic_cluster_key(body))

    for resource, changed in ((_CLUSTERS, cluster_changed), (_TOPICS, topic_changed)):
        for name, decorate in (
            ("create", kopf.on.create),
            ("update", kopf.on.update),
            ("resume", kopf.on.resume),
        ):
            decorate(GROUP, VERSION, resource, id=name, registry=registry)(changed)

    # The rest wake on watch events (their ids start with WAKER_PREFIX: one log line per
    # event would drown the rest, see QuietWakers).
    async def pause_changed(body: kopf.Body, memo: Any, **_: Any) -> None:
        """kopf's change detection skips annotations under its own storage prefix
        (``tierlog.io/``), the pause annotation among them: compared with the last pass."""
        if "paused" in memo and memo["paused"] != is_paused(body):
            woken_event(memo).set()

    for resource in (_CLUSTERS, _TOPICS):
        kopf.on.event(GROUP, VERSION, resource, id=f"{WAKER_PREFIX}paused", registry=registry)(
            pause_changed
        )

    @kopf.on.event(GROUP, VERSION, _TOPICS, id=f"{WAKER_PREFIX}topic-gone", registry=registry)
    async def topic_gone(body: kopf.Body, type: str | None, **_: Any) -> None:
        if type == "DELETED":  # its partitions leave the cluster's plan
            wakeups.wake_cluster(_topic_cluster_key(body))

    # What a cluster's pass reads besides its own object. A pod also wakes its cluster's
    # topics that wait for every broker to be ready (not those already synced).
    @kopf.on.event(
        "", "v1", "pods", id=f"{WAKER_PREFIX}pod", labels=_BROKER_POD_LABELS, registry=registry
    )
    async def broker_pod_changed(body: kopf.Body, **_: Any) -> None:
        wakeups.wake_cluster(_labelled_key(body, _INSTANCE))
        wakeups.wake_waiting_topics(_labelled_key(body, _INSTANCE))

    for group, plural in (("apps", "statefulsets"), ("", "configmaps")):
        kopf.on.event(
            group, "v1", plural, id=f"{WAKER_PREFIX}rendered", labels=_RENDERED_LABELS,
            registry=registry,
        )(rendered_changed)  # fmt: skip

    @kopf.on.event(
        "", "v1", "configmaps", id=f"{WAKER_PREFIX}state", labels=_STATE_LABELS, registry=registry
    )
    async def partition_state_changed(body: kopf.Body, **_: Any) -> None:
        """The brokers' and the controller's partition state (leaders, reassignments)."""
        wakeups.wake_cluster(_labelled_key(body, CLUSTER_LABEL))

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
            await asyncio.to_thread(controller.close)

    @kopf.on.delete(GROUP, VERSION, _TOPICS, registry=registry, backoff=BROKER_POLL_S)
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
            raise kopf.TemporaryError(f"waiting for {deletion.waiting}", delay=BROKER_POLL_S)

    @kopf.on.delete(GROUP, VERSION, _CLUSTERS, registry=registry, backoff=BROKER_POLL_S)
    async def cluster_deleted(body: kopf.Body, memo: Any, **_: Any) -> None:
        async with _lock(memo):
            deletion = await delete_cluster(kube, body)
        _post(body, memo, deletion.events)
        if not deletion.done:
            raise kopf.TemporaryError(f"waiting for {deletion.waiting}", delay=BROKER_POLL_S)
        metrics.cluster_deleted(body.metadata.namespace or "", body.metadata.name or "")
