"""A broker pod as the operator reads it (pure): its id, readiness, version, address and the
Secrets its sidecar's TLS and token come from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.operator import image_pull
from tierlog.operator.render.common import CONFIG_HASH_ANNOTATION
from tierlog.operator.render.security import TLS_VOLUME, TOKEN_VOLUME
from tierlog.operator.rolling import BrokerPod
from tierlog.operator.spec import SecretKeyRef
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


def _secret_volumes(spec: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {
        volume["name"]: volume["secret"]
        for volume in spec.get("volumes") or ()
        if volume.get("secret")
    }


def _token_secret(volumes: Mapping[str, Mapping[str, Any]]) -> SecretKeyRef | None:
    secret = volumes.get(TOKEN_VOLUME)
    if secret is None:
        return None
    return SecretKeyRef(secret["secretName"], secret["items"][0]["key"])


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
    spec = pod.get("spec") or {}
    port, ip = _grpc_port(spec), status.get("podIP")
    secrets = _secret_volumes(spec)
    return BrokerPod(
        broker_id=broker_id,
        name=metadata["name"],
        ready=ready,
        config_hash=(metadata.get("annotations") or {}).get(CONFIG_HASH_ANNOTATION, ""),
        deleting=bool(metadata.get("deletionTimestamp")),
        address=f"{ip}:{port}" if ip and port else "",
        image_pull_failed=bool(image_pull.of_pod(pod)),
        tls_secret=secrets[TLS_VOLUME]["secretName"] if TLS_VOLUME in secrets else "",
        token_secret=_token_secret(secrets),
    )
