"""The operator's few verbs against the Kubernetes API (lightkube), and nothing else.

Objects go in and out as plain dicts, the renderers' currency. Writes are server-side
apply under one field manager, forced: the operator owns the fields it renders and
re-asserts them on every pass, so applying is idempotent and a user's edit to a
rendered field is undone, while fields it never renders (a user's extra annotation)
are left alone.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import ConfigMap, Node, Pod, Secret
from lightkube.types import PatchType

from tierlog.operator.crds import CLUSTER_KIND, GROUP, TOPIC_KIND, VERSION
from tierlog.operator.status_patch import changes_status, status_patch

__all__ = [
    "FIELD_MANAGER",
    "Kube",
    "TierlogCluster",
    "TierlogTopic",
]

FIELD_MANAGER = "tierlog-operator"
log = logging.getLogger(__name__)

TierlogCluster = create_namespaced_resource(
    GROUP, VERSION, CLUSTER_KIND, "tierlogclusters", verbs=None
)
TierlogTopic = create_namespaced_resource(GROUP, VERSION, TOPIC_KIND, "tierlogtopics", verbs=None)
ServiceMonitor = create_namespaced_resource(
    "monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors", verbs=None
)

ClusterKopfPeering = create_global_resource(
    "kopf.dev", "v1", "ClusterKopfPeering", "clusterkopfpeerings", verbs=None
)
KopfPeering = create_namespaced_resource(
    "kopf.dev", "v1", "KopfPeering", "kopfpeerings", verbs=None
)


def _as_dict(obj: Any) -> dict[str, Any]:
    result: dict[str, Any] = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
    return result


class Kube:
    def __init__(self, client: AsyncClient | None = None):
        self.client = client or AsyncClient(field_manager=FIELD_MANAGER)

    async def apply(self, manifest: Mapping[str, Any]) -> None:
        await self.client.apply(
            codecs.from_dict(dict(manifest)), field_manager=FIELD_MANAGER, force=True
        )

    async def delete(self, manifest: Mapping[str, Any]) -> bool:
        """Delete the object ``manifest`` names; False if it was not there."""
        resource: Any = type(codecs.from_dict(dict(manifest)))
        metadata = manifest["metadata"]
        try:
            await self.client.delete(resource, metadata["name"], namespace=metadata["namespace"])
        except ApiError as error:
            if error.status.code == 404:
                return False
            raise
        return True

    async def config_map_data(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            found = await self.client.get(ConfigMap, name, namespace=namespace)
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise
        return dict(found.data or {})

    async def stateful_set_replicas(self, namespace: str, name: str) -> int | None:
        try:
            found = await self.client.get(StatefulSet, name, namespace=namespace)
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise
        return found.spec.replicas if found.spec else None

    async def scale_stateful_set(self, namespace: str, name: str, replicas: int) -> bool:
        """Set its replicas (only them: a StatefulSet the server would refuse whole can
        still be scaled); False if it is not there."""
        try:
            await self.client.patch(
                StatefulSet,
                name,
                {"spec": {"replicas": replicas}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        except ApiError as error:
            if error.status.code == 404:
                return False
            raise
        return True

    async def pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        return [
            _as_dict(pod)
            async for pod in self.client.list(Pod, namespace=namespace, labels=dict(selector))
        ]

    async def node_labels(self, name: str) -> dict[str, str]:
        """A Node's labels ({} if it is gone)."""
        try:
            found = await self.client.get(Node, name)
        except ApiError as error:
            if error.status.code == 404:
                return {}
            raise
        return dict((found.metadata.labels if found.metadata else None) or {})

    async def delete_pod(self, namespace: str, name: str) -> None:
        await self.client.delete(Pod, name, namespace=namespace)

    async def topics(self, namespace: str) -> list[dict[str, Any]]:
        return [
            _as_dict(topic) async for topic in self.client.list(TierlogTopic, namespace=namespace)
        ]

    async def cluster(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return _as_dict(await self.client.get(TierlogCluster, name, namespace=namespace))
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise

    async def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        """A Secret's values, decoded."""
        found = await self.client.get(Secret, name, namespace=namespace)
        return {key: base64.b64decode(value).decode() for key, value in (found.data or {}).items()}

    async def crd_exists(self, name: str) -> bool:
        """Whether a CRD is installed (a list, not a get: kopf needs list rights anyway)."""
        found = self.client.list(CustomResourceDefinition, fields={"metadata.name": name})
        async for _ in found:
            return True
        return False

    async def ensure_peering(self, name: str, namespaces: Sequence[str]) -> None:
        """kopf's peering object (cluster-wide, or one per watched namespace), if missing."""
        wanted: list[Any] = (
            [KopfPeering(metadata=ObjectMeta(name=name, namespace=ns)) for ns in namespaces]
            if namespaces
            else [ClusterKopfPeering(metadata=ObjectMeta(name=name))]
        )
        for peering in wanted:
            try:
                await self.client.create(peering)
            except ApiError as error:
                if error.status.code == 403:  # not ours to create: the chart ships it
                    log.warning("cannot create the peering object %s: %s", name, error)
                elif error.status.code != 409:  # 409: it exists already
                    raise

    async def patch_status(
        self,
        resource: Any,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        before: Mapping[str, Any] | None,
    ) -> None:
        """Write the keys of ``status`` whole into the object's status subresource, which
        held ``before`` (see ``status_patch``); other keys stay. Nothing is sent when
        ``before`` holds them already."""
        if not changes_status(before, status):
            return
        await self.client.patch(
            resource.Status,
            name,
            {"status": status_patch(before, status)},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
