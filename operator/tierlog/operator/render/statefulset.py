"""The brokers' StatefulSet: one ``tierlog-sidecar`` container per pod over its own volume.

``updateStrategy: OnDelete``: the StatefulSet controller never restarts a broker on its
own; the operator deletes one pod at a time once its sidecar says it is safe (see
``rolling.py``). The pod template carries the hash of everything a broker restarts
for (the shared config and the template itself), so a pod started from an older
version is recognised by its annotation.

Per-pod values come from the pod, not from the operator: the broker id is the
StatefulSet ordinal that ends the pod's name (through the downward API; the
``apps.kubernetes.io/pod-index`` label would need Kubernetes 1.28, the chart supports
1.27) and the advertised address is the pod's stable name under the headless Service;
Kubernetes expands ``$(VAR)`` in the arguments, so no shell is needed. The Kafka
listener advertises the same name on its own port, as a Strimzi broker advertises its
pod's name, under the listener's name (its security protocol: ``kafka_security_protocol``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tierlog.operator.render.common import (
    CONFIG_HASH_ANNOTATION,
    GRPC_PORT,
    KAFKA_PORT,
    METRICS_PORT,
    Manifest,
    Owner,
    config_map_name,
    headless_service_name,
    kafka_security_protocol,
    labels,
    metadata,
    selector_labels,
)
from tierlog.operator.render.configmap import (
    CONFIG_DIR,
    PROPERTIES_FILE,
    SHUTDOWN_GRACE_MS,
    TIER_CACHE_MOUNT,
    properties_text,
    sidecar_properties,
)
from tierlog.operator.render.rbac import broker_service_account_name
from tierlog.operator.render.security import security_mounts, security_volumes
from tierlog.operator.spec import ClusterSpec

__all__ = [
    "CLOSE_BUDGET_S",
    "CONTAINER_NAME",
    "RUN_AS_USER",
    "TERMINATION_GRACE_S",
    "desired_config_hash",
    "pod_template",
    "stateful_set",
]

CONTAINER_NAME = "tierlog"
RUN_AS_USER = 10001  # the image's non-root user
DATA_MOUNT = "/var/lib/tierlog"
SHARED_TIER_VOLUME = "tier"
TIER_CACHE_VOLUME = "tier-cache"
# What a broker needs between SIGTERM and its exit (docs/OPERATOR.md, "Stopping a
# broker"): calls in flight get SHUTDOWN_GRACE_MS, then every log closes (index trims
# and producer snapshots on num.recovery.threads.per.data.dir threads, one syncfs per
# log dir) and the checkpoints are written. CLOSE_BUDGET_S is that close for 4,000
# partitions each written since its last flush: 3x the slowest of restart_bench's runs
# on a 2-core machine at a load average of ~12 (docs/BENCHMARKS.md, "Restarts with
# many partitions"). A kubelet SIGKILL past it costs no data, only the check of the
# unflushed tails at the next start.
CLOSE_BUDGET_S = 105
TERMINATION_GRACE_S = SHUTDOWN_GRACE_MS // 1000 + CLOSE_BUDGET_S


def _container(cluster: ClusterSpec) -> dict[str, Any]:
    host = f"$(POD_NAME).{headless_service_name(cluster)}.{cluster.namespace}.svc"
    advertised = f"{host}:{GRPC_PORT},{kafka_security_protocol(cluster)}://{host}:{KAFKA_PORT}"
    ports = [
        {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
        {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        {"name": "kafka", "containerPort": KAFKA_PORT, "protocol": "TCP"},
    ]
    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    credentials = cluster.tier.credentials if cluster.tier else None
    if credentials is not None:
        for name, key in (
            ("AWS_ACCESS_KEY_ID", credentials.access_key_id_key),
            ("AWS_SECRET_ACCESS_KEY", credentials.secret_access_key_key),
        ):
            env.append(
                {
                    "name": name,
                    "valueFrom": {"secretKeyRef": {"name": credentials.secret_name, "key": key}},
                }
            )
    return {
        "name": CONTAINER_NAME,
        "image": cluster.image,
        "imagePullPolicy": cluster.image_pull_policy,
        "command": ["tierlog-sidecar"],
        "args": [
            f"--config-file={CONFIG_DIR}/{PROPERTIES_FILE}",
            "--node-id-from-pod-name=$(POD_NAME)",
            f"--config=advertised.listeners={advertised}",
            "--log-format=json",
        ],
        "env": env,
        "ports": ports,
        # /healthz: the event loop turns (a long recovery is not a reason to restart);
        # /readyz: recovered and serving, and false from the moment shutdown starts.
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "metrics"},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "failureThreshold": 2,
        },
        "resources": dict(cluster.resources),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_MOUNT},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
            *_shared_tier_mounts(cluster),
            *_tier_cache_mounts(cluster),
            *security_mounts(cluster),
        ],
    }


def _shared_tier_mounts(cluster: ClusterSpec) -> list[dict[str, Any]]:
    """A file:// tier's shared volume, at the tier's path (the CRD requires one)."""
    if cluster.tier is None or not cluster.tier.shared_claim:
        return []
    return [{"name": SHARED_TIER_VOLUME, "mountPath": cluster.tier.shared_path}]


def _tier_cache_mounts(cluster: ClusterSpec) -> list[dict[str, Any]]:
    """``spec.tier.cache``'s volume, where the sidecar's config puts the chunk cache."""
    if cluster.tier is None or cluster.tier.cache is None:
        return []
    return [{"name": TIER_CACHE_VOLUME, "mountPath": TIER_CACHE_MOUNT}]


def _pod_spec(cluster: ClusterSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(cluster)],
        "volumes": [
            {"name": "config", "configMap": {"name": config_map_name(cluster)}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
            *security_volumes(cluster),
        ],
    }
    if cluster.tier is not None and cluster.tier.shared_claim:
        claim = {"claimName": cluster.tier.shared_claim}
        spec["volumes"].append({"name": SHARED_TIER_VOLUME, "persistentVolumeClaim": claim})
    if cluster.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in cluster.image_pull_secrets]
    if broker_service_account_name(cluster):
        spec["serviceAccountName"] = broker_service_account_name(cluster)
    if cluster.pod.affinity:
        spec["affinity"] = dict(cluster.pod.affinity)
    if cluster.pod.tolerations:
        spec["tolerations"] = [dict(toleration) for toleration in cluster.pod.tolerations]
    if cluster.pod.priority_class_name:
        spec["priorityClassName"] = cluster.pod.priority_class_name
    return spec


def desired_config_hash(cluster: ClusterSpec) -> str:
    """The version of a broker: its shared config and its pod template, hashed."""
    digest = hashlib.sha256(properties_text(sidecar_properties(cluster)).encode())
    unhashed = _template(cluster, config_hash="")
    digest.update(json.dumps(unhashed, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _template(cluster: ClusterSpec, config_hash: str) -> dict[str, Any]:
    annotations = dict(cluster.pod.annotations)
    if config_hash:
        annotations[CONFIG_HASH_ANNOTATION] = config_hash
    return {
        "metadata": {
            # the user's labels never override the selector's
            "labels": {**cluster.pod.labels, **labels(cluster)},
            "annotations": annotations,
        },
        "spec": _pod_spec(cluster),
    }


def pod_template(cluster: ClusterSpec) -> dict[str, Any]:
    return _template(cluster, desired_config_hash(cluster))


def _volume_claims(cluster: ClusterSpec) -> list[dict[str, Any]]:
    """Each broker's data volume, and its chunk cache's when ``spec.tier.cache`` asks."""
    claims = [_volume_claim(cluster, "data", cluster.storage_size, cluster.storage_class)]
    if cluster.tier is not None and cluster.tier.cache is not None:
        cache = cluster.tier.cache
        claims.append(_volume_claim(cluster, TIER_CACHE_VOLUME, cache.size, cache.storage_class))
    return claims


def _volume_claim(
    cluster: ClusterSpec, name: str, size: str, storage_class: str | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name, "labels": labels(cluster)}, "spec": spec}


def stateful_set(cluster: ClusterSpec, owner: Owner, replicas: int) -> Manifest:
    """The StatefulSet with ``replicas`` pods (the brokers, or more while draining)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(cluster, cluster.name, owner),
        "spec": {
            "replicas": replicas,
            "serviceName": headless_service_name(cluster),
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": selector_labels(cluster)},
            # a scaled-away broker's volume stays: its data is in the tier, and a
            # scale-up again finds it (deleting volumes is the user's call)
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Retain",
                "whenScaled": "Retain",
            },
            "template": pod_template(cluster),
            "volumeClaimTemplates": _volume_claims(cluster),
        },
    }
