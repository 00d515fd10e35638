"""One pass over a TierlogTopic: make every broker of its cluster hold the topic as asked.

Each broker keeps its own topic store, so the topic is created, grown and reconfigured
on each one through its admin API, and is Ready only once all of them agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.operator import brokers
from tierlog.operator.broker_security import BrokerSecurity
from tierlog.operator.conditions import DEGRADED, READY, Condition
from tierlog.operator.events import Event
from tierlog.operator.kube import Kube
from tierlog.operator.pods import broker_pod
from tierlog.operator.reconcile import Pass, is_paused, paused_status, status_conditions
from tierlog.operator.render.common import selector_labels
from tierlog.operator.spec import ClusterSpec, TopicSpec
from tierlog.operator.topic_sync import TopicChanges, changes

__all__ = ["reconcile_topic"]


def _not_ready(body: Mapping[str, Any], topic: TopicSpec, reason: str, message: str) -> Pass:
    status = {
        "topicName": topic.name,
        "conditions": status_conditions(body, [Condition(READY, False, reason, message)]),
    }
    return Pass(status)


async def reconcile_topic(kube: Kube, body: Mapping[str, Any]) -> Pass:
    if body["metadata"].get("deletionTimestamp"):  # being deleted: not created again
        return Pass({})
    if is_paused(body):
        return Pass(paused_status(body))
    topic = TopicSpec.from_resource(body)
    namespace = body["metadata"]["namespace"]
    cluster_body = await kube.cluster(namespace, topic.cluster)
    if cluster_body is None:
        return _not_ready(
            body, topic, "ClusterNotFound", f"no TierlogCluster {topic.cluster!r} in {namespace}"
        )
    cluster = ClusterSpec.from_resource(cluster_body)
    found = [broker_pod(pod) for pod in await kube.pods(namespace, selector_labels(cluster))]
    pods = {pod.broker_id: pod for pod in found if pod is not None}
    missing = [
        node
        for node in range(cluster.brokers)
        if node not in pods or not pods[node].ready or not pods[node].address
    ]
    if missing:
        return _not_ready(
            body, topic, "BrokersNotReady", f"waiting for brokers {missing} to be ready"
        )
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
            return Pass(status, [shrink])
        if not change.none:
            await brokers.apply_topic(address, topic, change, security=security)
            events.append(Event(False, "TopicUpdated", f"broker {node}: {_describe(change)}"))
    synced: dict[str, Any] = {
        "observedGeneration": body["metadata"].get("generation", 0),
        "topicName": topic.name,
        "partitions": topic.partitions,
        "config": dict(topic.configs),
        "conditions": status_conditions(
            body,
            [
                Condition(READY, True, "Synced", f"on all {cluster.brokers} brokers"),
                Condition(DEGRADED, False, "AsExpected"),
            ],
        ),
    }
    return Pass(synced, events)


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
