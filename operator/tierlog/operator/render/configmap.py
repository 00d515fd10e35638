"""The cluster's ConfigMap: the sidecar's broker config and the partition assignment.

``server.properties`` is what every broker starts with (Kafka's broker names); a change
to it is a configuration change, rolled out one broker at a time, and its hash marks
which pods run which version. ``assignment.json`` (brokers' gRPC and Kafka addresses
and each partition's owner) is re-read by running sidecars, so scaling never restarts a broker.
Per-pod settings (``node.id``, ``advertised.listeners``) come from the pod itself (see
``statefulset.py``).
"""

from __future__ import annotations

from tierlog.operator.assignment import Assignment
from tierlog.operator.render.common import (
    GRPC_PORT,
    KAFKA_PORT,
    METRICS_PORT,
    Manifest,
    Owner,
    config_map_name,
    kafka_security_protocol,
    metadata,
)
from tierlog.operator.render.security import security_properties
from tierlog.operator.spec import ClusterSpec, Replication, Tier, kafka_value
from tierlog.storage.properties import format_properties

__all__ = [
    "ASSIGNMENT_FILE",
    "CONFIG_DIR",
    "DATA_DIR",
    "PROPERTIES_FILE",
    "SHUTDOWN_GRACE_MS",
    "TIER_CACHE_DIR",
    "TIER_CACHE_MOUNT",
    "config_map",
    "properties_text",
    "sidecar_properties",
]

CONFIG_DIR = "/etc/tierlog"
PROPERTIES_FILE = "server.properties"
ASSIGNMENT_FILE = "assignment.json"
DATA_DIR = "/var/lib/tierlog/data"  # below the volume's root, away from lost+found
TIER_CACHE_MOUNT = "/var/cache/tierlog"  # ``spec.tier.cache``'s volume
TIER_CACHE_DIR = f"{TIER_CACHE_MOUNT}/chunks"
SHUTDOWN_GRACE_MS = 30_000  # calls in flight get this long after SIGTERM


def sidecar_properties(cluster: ClusterSpec) -> dict[str, str]:
    """The broker config every broker of the cluster shares, under Kafka's names."""
    props = {
        "log.dirs": DATA_DIR,
        "listeners": f"0.0.0.0:{GRPC_PORT},{kafka_security_protocol(cluster)}://0.0.0.0:{KAFKA_PORT}",
        "tierlog.metrics.listeners": f"0.0.0.0:{METRICS_PORT}",
        "cluster.id": f"{cluster.namespace}.{cluster.name}",
        "tierlog.shutdown.grace.ms": str(SHUTDOWN_GRACE_MS),
        "tierlog.cluster.assignment.file": f"{CONFIG_DIR}/{ASSIGNMENT_FILE}",
    }
    props.update({key: kafka_value(value) for key, value in cluster.log_defaults.items()})
    if cluster.tier is not None:
        props.update(_tier_properties(cluster.tier))
    if cluster.fsync.policy == "perBatch":
        props["log.flush.interval.messages"] = "1"
    elif cluster.fsync.policy == "interval":
        props["log.flush.interval.ms"] = str(cluster.fsync.interval_ms)
    props.update(security_properties(cluster))
    if cluster.replication is not None:
        props.update(_replication_properties(cluster, cluster.replication))
    return props


# How often a broker reads its partition state: each read is a few API requests, so
# slower than a local store's 100 ms; a failover waits for a lease to expire anyway.
REPLICATION_STATE_POLL_MS = 500


def _replication_properties(cluster: ClusterSpec, replication: Replication) -> dict[str, str]:
    """The partition-state store in the API server (the brokers' Role lets them keep
    it), and Kafka's replication defaults from ``spec.replication``."""
    return {
        "tierlog.replication.state.store": "kubernetes",
        "tierlog.replication.state.namespace": cluster.namespace,
        "tierlog.replication.state.cluster": cluster.name,
        "tierlog.replication.state.poll.ms": str(REPLICATION_STATE_POLL_MS),
        "default.replication.factor": str(replication.factor),
        "min.insync.replicas": str(replication.min_insync_replicas),
        "auto.leader.rebalance.enable": kafka_value(replication.auto_leader_rebalance),
    }


def _tier_properties(tier: Tier) -> dict[str, str]:
    """The tier's location; its S3 keys come from the environment (see statefulset.py)."""
    props = {"tierlog.tier.url": tier.url}
    if tier.restore:  # on every start: a restored broker's restart is an ordinary start
        props["tierlog.tier.restore"] = "true"
    if tier.cache is not None:  # its own volume (statefulset.py), filled to its limit
        props["tierlog.remote.cache.dir"] = TIER_CACHE_DIR
        props["tierlog.remote.cache.max.bytes"] = str(tier.cache.max_bytes)
    if tier.url.startswith("s3://"):
        props["tierlog.tier.s3.region"] = tier.region
        props["tierlog.tier.s3.path.style.access.enabled"] = kafka_value(tier.force_path_style)
        if tier.endpoint:
            props["tierlog.tier.s3.endpoint.url"] = tier.endpoint
    return props


def properties_text(props: dict[str, str]) -> str:
    """Escaped as the sidecar's reader expects (a value may hold a backslash)."""
    header = "# Written by the tierlog operator from the TierlogCluster; do not edit.\n"
    return header + format_properties(props)


def config_map(cluster: ClusterSpec, owner: Owner, assignment: Assignment) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(cluster, config_map_name(cluster), owner),
        "data": {
            PROPERTIES_FILE: properties_text(sidecar_properties(cluster)),
            ASSIGNMENT_FILE: assignment.to_json(),
        },
    }
