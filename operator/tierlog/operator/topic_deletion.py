"""Deleting a TierlogTopic deletes the topic on every broker of its cluster.

As Strimzi's topic operator does by default: the resource keeps the operator's
finalizer until each broker has deleted the topic (its partitions' logs, and their
tier data, go with it; a broker that never had it counts as done). Some deletions
cannot or should not reach the brokers, and never wedge the finalizer:

- the cluster is gone or being deleted: its brokers go with it, nothing to do;
- another TierlogTopic of the cluster names the same topic: it stays, still managed;
- the topic is paused (``tierlog.io/pause-reconciliation``): the operator keeps its
  hands off, the topic stays;
- a broker does not answer (its pod missing, not ready, unreachable): the deletion is
  retried on every pass for ``give_up_after_s`` from the deletion request, then the
  finalizer is released anyway with a warning Event naming the brokers that may still
  hold the topic. An operator that cannot reach a broker cannot tell a dead one from
  a slow one, and a resource that can never be deleted is worse than a leftover topic
  an admin can remove by hand (``tierlog topics delete``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tierlog.operator import brokers
from tierlog.operator.broker_security import BrokerSecurity
from tierlog.operator.events import Event
from tierlog.operator.kube import Kube
from tierlog.operator.pods import broker_pod
from tierlog.operator.reconcile import is_paused
from tierlog.operator.render.common import selector_labels
from tierlog.operator.spec import ClusterSpec, TopicSpec

__all__ = ["Deletion", "delete_topic"]


@dataclass(frozen=True)
class Deletion:
    done: bool  # the finalizer may go
    events: list[Event] = field(default_factory=list)
    waiting: str = ""  # what a deletion not done yet waits for


def _seconds_since(timestamp: str | None, now: datetime.datetime) -> float:
    if not timestamp:
        return 0.0
    return (now - datetime.datetime.fromisoformat(timestamp)).total_seconds()


async def _same_topic_elsewhere(kube: Kube, body: Mapping[str, Any], topic: TopicSpec) -> str:
    """The name of another, live TierlogTopic for the same topic of the same cluster."""
    for other in await kube.topics(body["metadata"]["namespace"]):
        metadata = other["metadata"]
        if metadata["uid"] == body["metadata"]["uid"] or metadata.get("deletionTimestamp"):
            continue
        spec = TopicSpec.from_resource(other)
        if (spec.cluster, spec.name) == (topic.cluster, topic.name):
            return str(metadata["name"])
    return ""


async def delete_topic(
    kube: Kube, body: Mapping[str, Any], *, give_up_after_s: float, now: datetime.datetime
) -> Deletion:
    topic = TopicSpec.from_resource(body)
    namespace = body["metadata"]["namespace"]
    if is_paused(body):
        return Deletion(True, [Event(False, "TopicKept", f"paused: {topic.name} stays")])
    cluster_body = await kube.cluster(namespace, topic.cluster)
    if cluster_body is None or cluster_body["metadata"].get("deletionTimestamp"):
        message = f"the cluster {topic.cluster} is gone or going, and its brokers with it"
        return Deletion(True, [Event(False, "TopicDeletionSkipped", message)])
    twin = await _same_topic_elsewhere(kube, body, topic)
    if twin:
        message = f"{topic.name} stays on the brokers: TierlogTopic {twin} manages it too"
        return Deletion(True, [Event(False, "TopicKept", message)])
    cluster = ClusterSpec.from_resource(cluster_body)
    found = [broker_pod(pod) for pod in await kube.pods(namespace, selector_labels(cluster))]
    pods = {pod.broker_id: pod for pod in found if pod is not None}
    every = sorted(set(range(cluster.brokers)) | set(pods))
    unreached: dict[int, str] = {}
    security = BrokerSecurity(kube, cluster)
    for node in every:
        pod = pods.get(node)
        if pod is None or not pod.ready or not pod.address:
            unreached[node] = "its pod is not ready"
            continue
        try:
            await brokers.delete_topic(
                pod.address, topic.name, security=await security.for_pod(pod)
            )
        except Exception as error:  # tried again on the next pass, until giving up
            unreached[node] = f"{type(error).__name__}: {error}"
    if not unreached:
        message = f"{topic.name} deleted on brokers {every}"
        return Deletion(True, [Event(False, "TopicDeleted", message)])
    waiting = "; ".join(f"broker {node}: {why}" for node, why in sorted(unreached.items()))
    waited_s = _seconds_since(body["metadata"].get("deletionTimestamp"), now)
    if waited_s < give_up_after_s:
        return Deletion(False, waiting=waiting)
    message = (
        f"gave up after {waited_s:.0f} s: {topic.name} may remain on brokers "
        f"{sorted(unreached)} ({waiting}); delete it there by hand"
    )
    return Deletion(True, [Event(True, "TopicDeletionAbandoned", message)])
