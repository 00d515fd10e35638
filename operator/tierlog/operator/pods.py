"""A broker pod as the operator reads it (pure): its id, readiness, version and address."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.operator import image_pull
from tierlog.operator.render.common import CONFIG_HASH_ANNOTATION
from tierlog.operator.rolling import BrokerPod
from tierlog.sidecar.pod_ordinal import pod_ordinal
from tierlog.storage.errors import InvalidConfigError

__all__ = ["broker_pod"]


def _broker_id(metadata: Mapping[str, Any]) -> int | None:
    """The StatefulSet ordinal that ends the name, as the pod's sidecar reads it."""
    try:
        return pod_ordinal(metadata["name"])
    except InvalidConfigError:
        return None


def _grpc_port(spec: Mapping[str, Any]) -> int | None:
    for container in spec.get("containers") or ():
        for port in container.get("ports") or ():
            if port.get("name") == "grpc":
                return int(port["containerPort"])
    return None


def broker_pod(pod: Mapping[str, Any]) -> BrokerPod | None:
    """The broker a pod runs, or None for a pod that is no broker of ours."""
    metadata, status = pod["metadata"], pod.get("status") or {}
    broker_id = _broker_id(metadata)
    if broker_id is None:
        return None
    ready = any(
        condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in status.get("conditions") or ()
    )
    port, ip = _grpc_port(pod.get("spec") or {}), status.get("podIP")
    return BrokerPod(
        broker_id=broker_id,
        name=metadata["name"],
        ready=ready,
        config_hash=(metadata.get("annotations") or {}).get(CONFIG_HASH_ANNOTATION, ""),
        deleting=bool(metadata.get("deletionTimestamp")),
        address=f"{ip}:{port}" if ip and port else "",
        image_pull_failed=bool(image_pull.of_pod(pod)),
    )
