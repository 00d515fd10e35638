"""Deleting a TierlogCluster: the tier's data is kept unless ``deletionPolicy: Delete``.

With ``Delete`` the brokers stop first: the StatefulSet is scaled to zero and the
finalizer waits until no broker pod is left. A running broker keeps writing to the tier
(uploads, manifests, a partition's claim), so emptying the bucket under it would leave
objects behind, or manifests naming objects that are gone. Then every object under the
tier's root goes (``bucket.py``). The objects the cluster owns go with it through their
owner references (Kubernetes' garbage collector).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.operator import bucket
from tierlog.operator.events import Event
from tierlog.operator.kube import Kube
from tierlog.operator.render.common import selector_labels
from tierlog.operator.spec import ClusterSpec
from tierlog.operator.topic_deletion import Deletion

__all__ = ["delete_cluster"]


async def delete_cluster(kube: Kube, body: Mapping[str, Any]) -> Deletion:
    cluster = ClusterSpec.from_resource(body)
    if cluster.tier is None:
        return Deletion(True)
    if cluster.deletion_policy != "Delete":
        message = f"deletionPolicy {cluster.deletion_policy}: {cluster.tier.url} is kept"
        return Deletion(True, [Event(False, "TierDataRetained", message)])
    await kube.scale_stateful_set(cluster.namespace, cluster.name, 0)
    pods = await kube.pods(cluster.namespace, selector_labels(cluster))
    running = sorted(pod["metadata"]["name"] for pod in pods)
    if running:
        waiting = f"brokers {running} to stop before the tier's data is deleted"
        message = f"deletionPolicy Delete: waiting for {waiting} (they write to it)"
        event = Event(False, "WaitingForBrokers", message, state_of=cluster.name)
        return Deletion(False, [event], waiting)
    credentials = cluster.tier.credentials
    secret = (
        await kube.secret_data(cluster.namespace, credentials.secret_name) if credentials else None
    )
    deleted = await bucket.delete_tier_data(cluster.tier, secret)
    message = f"deletionPolicy Delete: {deleted} objects deleted from {cluster.tier.url}"
    return Deletion(True, [Event(False, "TierDataDeleted", message)])
