"""One pass over a TierlogTopic: make every broker of its cluster hold the topic as asked.

Each broker keeps its own topic store, so the topic is created, grown and reconfigured
on each one through its admin API, and is Ready only once all of them agree.

A pass that finds the topic's generation and its brokers (ids and addresses) as the
last pass that synced it left them asks the brokers nothing, until ``recheck_after_s``
after that check (the resync, for a change made behind the operator's back): a
cluster's change wakes every topic, and a thousand topics asking their brokers again
what they asked a moment ago would cost a thousand reads for nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierlog.operator import brokers
from tierlog.operator.broker_security import BrokerSecurity
from tierlog.operator.cluster_reads import ClusterReads
from tierlog.operator.conditions import DEGRADED, READY, Condition
from tierlog.operator.events import Event
from tierlog.operator.kube import Kube
from tierlog.operator.pods import broker_pod
from tierlog.operator.reconcile import Pass, is_paused, paused_status, status_conditions
from tierlog.operator.spec import ClusterSpec, TopicSpec
from tierlog.operator.topic_sync import TopicChanges, changes

__all__ = ["SyncedTopic", "TopicPass", "reconcile_topic"]


@dataclass(frozen=True)
class SyncedTopic:
    """What the last pass that synced a topic found: its spec's generation, its brokers'
    ids and addresses, and when it asked them (``time.monotonic()``)."""

    generation: int
    brokers: tuple[tuple[int, str], ...]
    checked_at_s: float


@dataclass(frozen=True)
class TopicPass:
    outcome: Pass
    synced: SyncedTopic | None  # None: the topic is not synced (it waits, or is refused)


def _not_ready(body: Mapping[str, Any], topic: TopicSpec, reason: str, message: str) -> Pass:
    status = {
        "topicName": topic.name,
        "conditions": status_conditions(body, [Condition(READY, False, reason, message)]),
    }
    return Pass(status)


def _synced(body: Mapping[str, Any], topic: TopicSpec, brokers: int) -> dict[str, Any]:
    return {
        "observedGeneration": body["metadata"].get("generation", 0),
        "topicName": topic.name,
        "partitions": topic.partitions,
        "config": dict(topic.configs),
        "conditions": status_conditions(
            body,
            [
                Condition(READY, True, "Synced", f"on all {brokers} brokers"),
                Condition(DEGRADED, False, "AsExpected"),
            ],
        ),
    }


async def reconcile_topic(
    kube: Kube,
    reads: ClusterReads,
    body: Mapping[str, Any],
    last: SyncedTopic | None = None,
    *,
    recheck_after_s: float = 0.0,
) -> TopicPass:
    """One pass; ``reads``: its cluster's, shared with the topic passes of the moment;
    ``last``: what the last pass that synced the topic found."""
    if body["metadata"].get("deletionTimestamp"):  # being deleted: not created again
        return TopicPass(Pass({}), None)
    if is_paused(body):
        return TopicPass(Pass(paused_status(body)), None)
    topic = TopicSpec.from_resource(body)
    namespace = body["metadata"]["namespace"]
    read = await reads.read(namespace, topic.cluster)
    cluster_body = read.body
    if cluster_body is None:
        message = f"no TierlogCluster {topic.cluster!r} in {namespace}"
        return TopicPass(_not_ready(body, topic, "ClusterNotFound", message), None)
    cluster = ClusterSpec.from_resource(cluster_body)
    found = [broker_pod(pod) for pod in read.pods]
    pods = {pod.broker_id: pod for pod in found if pod is not None}
    missing = [
        node
        for node in range(cluster.brokers)
        if node not in pods or not pods[node].ready or not pods[node].address
    ]
    if missing:
        message = f"waiting for brokers {missing} to be ready"
        return TopicPass(_not_ready(body, topic, "BrokersNotReady", message), None)
    seen = SyncedTopic(
        body["metadata"].get("generation", 0),
        tuple((node, pods[node].address) for node in range(cluster.brokers)),
        time.monotonic(),
    )
    if (
        last is not None
        and (last.generation, last.brokers) == (seen.generation, seen.brokers)
        and seen.checked_at_s - last.checked_at_s < recheck_after_s
    ):
        return TopicPass(Pass(_synced(body, topic, cluster.brokers)), last)
    events = []
    broker_security = BrokerSecurity(kube, cluster)
    for node in range(cluster.brokers):
        address = pods[node].address
        security = await broker_security.for_pod(pods[node])
        change = changes(topic, await brokers.read_topic(address, topic.name, security=security))
        if change.impossible:
            status = {
                "topicName": topic.name,
                "conditions": status_conditions(
                    body,
                    [
                        Condition(READY, False, "PartitionsCannotShrink", change.impossible),
                        Condition(DEGRADED, True, "PartitionsCannotShrink", change.impossible),
                    ],
                ),
            }
            shrink = Event(True, "PartitionsCannotShrink", change.impossible, state_of=topic.name)
            return TopicPass(Pass(status, [shrink]), None)
        if not change.none:
            await brokers.apply_topic(address, topic, change, security=security)
            events.append(Event(False, "TopicUpdated", f"broker {node}: {_describe(change)}"))
    return TopicPass(Pass(_synced(body, topic, cluster.brokers), events), seen)


def _describe(change: TopicChanges) -> str:
    if change.create:
        return "created"
    parts = []
    if change.grow_to:
        parts.append(f"grown to {change.grow_to} partitions")
    if change.set_configs:
        parts.append(f"set {', '.join(sorted(change.set_configs))}")
    if change.delete_configs:
        parts.append(f"removed {', '.join(change.delete_configs)}")
    return "; ".join(parts)
