"""The CustomResourceDefinitions ``TierlogCluster`` and ``TierlogTopic`` (``tierlog.io/v1alpha1``).

Rendered here, in Python, and written as YAML to ``charts/tierlog/files/crds/`` and
``deploy/base/crds/`` by ``python -m tierlog.operator.crds`` (``make crds``); a test fails
when the files drift from this module. Python is the source because the schema of the
Kafka-named settings comes from the code that reads them: each topic config of
``tierlog.storage.config.LogConfig`` (its type, minimum and choices) becomes a typed
property, so the API server rejects ``retention.ms: forever`` or a misspelt name before
the operator or a sidecar ever sees it.

Every schema is structural (types everywhere, no unknown fields unless marked), so the
API server prunes, defaults and validates; CEL rules carry what types cannot (partitions
only grow, a topic's name and cluster are fixed).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tierlog.broker.topics import MAX_PARTITIONS
from tierlog.operator.spec import CACHE_HEADROOM_PERCENT, CACHE_SIZE_PATTERN
from tierlog.storage.config import BROKER_TO_TOPIC_KEYS, LogConfig

__all__ = [
    "CLUSTER_KIND",
    "GROUP",
    "LOG_DEFAULT_KEYS",
    "TOPIC_KIND",
    "VERSION",
    "cluster_crd",
    "peering_crds",
    "render_crds",
    "topic_crd",
    "write_crds",
]

GROUP = "tierlog.io"
VERSION = "v1alpha1"
CLUSTER_KIND = "TierlogCluster"
TOPIC_KIND = "TierlogTopic"

# Where the rendered files live, relative to the checkout.
CRD_DIRS = (Path("charts/tierlog/files/crds"), Path("deploy/base/crds"))

# Flushing is the fsync policy's job (spec.fsync), not a free-form log default.
_FLUSH_KEYS = {"flush.messages", "flush.ms"}
# Broker-level config name -> the topic config it is the default of.
LOG_DEFAULT_KEYS: dict[str, str] = {
    broker: topic
    for broker, topic in sorted(BROKER_TO_TOPIC_KEYS.items())
    if topic not in _FLUSH_KEYS
}

Schema = dict[str, Any]

_NUMBER = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
# Kubernetes' quantity grammar: a signed number, then a binary or decimal suffix or an exponent.
_QUANTITY_PATTERN = rf"^(\+|-)?{_NUMBER}(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?{_NUMBER}))?$"


# --- small schema builders -------------------------------------------------------------------


def _obj(
    properties: Mapping[str, Schema],
    description: str = "",
    *,
    required: Iterable[str] = (),
    default: Any = None,
) -> Schema:
    schema: Schema = {"type": "object"}
    if description:
        schema["description"] = description
    schema["properties"] = dict(properties)
    if required:
        schema["required"] = list(required)
    if default is not None:
        schema["default"] = default
    return schema


def _str(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def _int(description: str, **extra: Any) -> Schema:
    return {"type": "integer", "format": "int64", "description": description, **extra}


def _bool(description: str, default: bool) -> Schema:
    return {"type": "boolean", "description": description, "default": default}


def _string_map(description: str) -> Schema:
    return {
        "type": "object",
        "description": description,
        "additionalProperties": {"type": "string"},
    }


def _quantity(description: str, **extra: Any) -> Schema:
    """A Kubernetes quantity (``10Gi``, ``500m``, ``2``): a number or a string."""
    return {
        "description": description,
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": _QUANTITY_PATTERN,
        **extra,
    }


def _opaque(description: str) -> Schema:
    """A Kubernetes type passed through as written (the API server checks it in the Pod)."""
    return {
        "type": "object",
        "description": description,
        "x-kubernetes-preserve-unknown-fields": True,
    }


# --- Kafka-named settings ----------------------------------------------------------------------


def _config_property(field: dataclasses.Field[Any], name: str) -> Schema:
    """One Kafka config as a typed property: its type, minimum and choices from LogConfig."""
    kind = {"int": "integer", "float": "number", "bool": "boolean"}.get(str(field.type), "string")
    owner = "tierlog's" if name.startswith("tierlog.") else "Kafka's"
    schema: Schema = {"type": kind, "description": f"{owner} {name} (default {field.default})"}
    if kind == "integer":
        schema["format"] = "int64"
    if field.metadata["min"] is not None:
        schema["minimum"] = field.metadata["min"]
    if field.metadata["choices"]:
        schema["enum"] = list(field.metadata["choices"])
    return schema


def _topic_config_fields() -> dict[str, dataclasses.Field[Any]]:
    return {f.metadata["key"]: f for f in dataclasses.fields(LogConfig)}


def topic_config_schema(description: str) -> Schema:
    """Topic configs under their Kafka names (``retention.ms``...); nothing else."""
    fields = _topic_config_fields()
    return _obj(
        {name: _config_property(field, name) for name, field in sorted(fields.items())},
        description,
    )


def log_defaults_schema() -> Schema:
    """Broker-level defaults under Kafka's broker names (``log.retention.ms``...)."""
    fields = _topic_config_fields()
    return _obj(
        {
            broker: _config_property(fields[topic], broker)
            for broker, topic in LOG_DEFAULT_KEYS.items()
        },
        "Every topic's default log settings, under Kafka's broker config names; a "
        "TierlogTopic's config overrides them. Flushing is set by fsync.",
        default={},
    )


# --- the cluster -------------------------------------------------------------------------------


def _conditions_schema() -> Schema:
    condition = _obj(
        {
            "type": _str("Ready, Progressing, Degraded or ReconciliationPaused"),
            "status": _str("True, False or Unknown", enum=["True", "False", "Unknown"]),
            "reason": _str("A CamelCase word for machines"),
            "message": _str("What happened, for people"),
            "lastTransitionTime": _str("When status last changed", format="date-time"),
            "observedGeneration": _int("The generation this condition describes"),
        },
        required=["type", "status"],
    )
    return {
        "type": "array",
        "description": "The latest observations of the object's state",
        "items": condition,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    }


# A volumeClaimTemplate, which Kubernetes keeps as the StatefulSet was created.
_CACHE_FIXED = (
    "tier.cache (size, storageClassName) cannot be added, removed or changed once the "
    "cluster exists: it is a volumeClaimTemplate of the brokers, which Kubernetes keeps "
    "as created"
)


def _tier_schema() -> Schema:
    credentials = _obj(
        {
            "name": _str("The Secret (in the cluster's namespace) holding the S3 keys"),
            "accessKeyIdKey": _str("Its key with the access key id", default="AWS_ACCESS_KEY_ID"),
            "secretAccessKeyKey": _str(
                "Its key with the secret access key", default="AWS_SECRET_ACCESS_KEY"
            ),
        },
        "Credentials for S3; without them the sidecar uses the pod's own identity",
        required=["name"],
    )
    s3 = _obj(
        {
            "endpoint": _str("An S3-compatible endpoint URL (empty: AWS)"),
            "region": _str("The bucket's region", default="us-east-1"),
            "forcePathStyle": _bool("Path-style addressing (MinIO and most non-AWS)", False),
            "credentialsSecret": credentials,
        },
        "S3 settings for an s3:// tier URL",
        default={},
    )
    shared = _obj(
        {
            "claimName": _str(
                "A ReadWriteMany PersistentVolumeClaim (in the cluster's namespace), mounted "
                "at the file:// tier's path in every broker pod",
                minLength=1,
            )
        },
        "The volume a file:// tier lives on, shared by every broker",
        required=["claimName"],
    )
    cache = _obj(
        {
            "size": _str(
                "Each broker's cache volume: a whole number of Mi, Gi, Ti, Pi (or M, G, T, "
                f"P); the chunk cache stays {CACHE_HEADROOM_PERCENT}% below it, the file "
                "system's share",
                pattern=CACHE_SIZE_PATTERN,
            ),
            "storageClassName": _str("Its StorageClass (empty: the cluster's default)"),
        },
        "A volume of each broker's own for the chunk cache of tiered reads (without it the "
        "cache lives on the data volume); cannot change once the cluster exists",
        required=["size"],
    )
    cache["x-kubernetes-validations"] = [{"rule": "self == oldSelf", "message": _CACHE_FIXED}]
    schema = _obj(
        {
            "url": _str(
                "Where closed segments are offloaded: s3://BUCKET[/PREFIX], or file:///PATH "
                "on a sharedVolume",
                pattern=r"^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?|file:///.+)$",
                maxLength=1024,
            ),
            "s3": s3,
            "sharedVolume": shared,
            "restore": _bool(
                "Restore from the bucket a lost cluster filled: each broker whose volume is "
                "empty creates the tiered topics the bucket records and continues every "
                "partition from the tier's end (a broker already restored starts as usual; "
                "one whose volume holds other data refuses to start). With replication the "
                "first broker puts the topics in the partition-state store, each "
                "partition's replicas start at the tier's end and only its leader uploads",
                False,
            ),
            "cache": cache,
        },
        "Tiered storage; without it every segment stays on the brokers' volumes and a "
        "scale-down that would drop data is refused",
        required=["url"],
    )
    # A file:// directory on each pod's own disk would be a different tier per broker: a
    # partition drained through it, or a broker on a new node, would find nothing there.
    schema["x-kubernetes-validations"] = [
        {
            "rule": "!self.url.startsWith('file://') || has(self.sharedVolume)",
            "message": (
                "a file:// tier must be on a volume every broker shares: set "
                "tier.sharedVolume.claimName to a ReadWriteMany PersistentVolumeClaim, or use "
                "an s3:// tier (a directory on each pod's own disk is a different tier per "
                "broker)"
            ),
        },
        {
            "rule": "!has(self.sharedVolume) || self.url.startsWith('file://')",
            "message": "tier.sharedVolume is for a file:// tier only",
        },
    ]
    return schema


def _pod_template_schema() -> Schema:
    toleration = _obj(
        {
            "key": _str("The taint key"),
            "operator": _str("Exists or Equal", enum=["Exists", "Equal"]),
            "value": _str("The taint value"),
            "effect": _str(
                "The taint effect", enum=["NoSchedule", "PreferNoSchedule", "NoExecute"]
            ),
            "tolerationSeconds": _int("How long a NoExecute taint is tolerated"),
        }
    )
    return _obj(
        {
            "labels": _string_map("Extra labels on every broker pod"),
            "annotations": _string_map("Extra annotations on every broker pod"),
            "affinity": _opaque("A core/v1 Affinity for the broker pods"),
            "tolerations": {
                "type": "array",
                "description": "Tolerations of the broker pods",
                "items": toleration,
            },
            "priorityClassName": _str("The broker pods' PriorityClass"),
        },
        "Overrides of the broker pods' template",
        default={},
    )


def _storage_schema() -> Schema:
    """Fixed once the cluster exists: it is the StatefulSet's volumeClaimTemplates, which
    Kubernetes never lets change (every apply of the StatefulSet would fail). Refused here,
    at the request, the message says what to do instead."""
    schema = _obj(
        {
            "size": _quantity("Each broker's volume size", default="10Gi"),
            "storageClassName": _str("The volumes' StorageClass (empty: the cluster's default)"),
        },
        "Each broker's persistent volume; cannot change once the cluster exists",
        default={},
    )
    schema["x-kubernetes-validations"] = [
        {
            "rule": "self == oldSelf",
            "message": (
                "storage (size, storageClassName) cannot change once the cluster exists: it "
                "is the brokers' volumeClaimTemplates, which Kubernetes keeps as created; to "
                "grow the volumes, expand each PersistentVolumeClaim data-NAME-N (when its "
                "StorageClass allows volume expansion)"
            ),
        }
    ]
    return schema


def _secret_key_ref(description: str, default_key: str) -> Schema:
    return _obj(
        {
            "name": _str("The Secret, in the cluster's namespace", minLength=1),
            "key": _str("Its key", default=default_key, minLength=1),
        },
        description,
        required=["name"],
    )


def _tls_schema() -> Schema:
    """TLS on the brokers' gRPC port (``ssl.*`` of the sidecar). The operator reaches the
    brokers through it too, so with mutual TLS it needs its own client certificate."""
    schema = _obj(
        {
            "secretName": _str(
                "A kubernetes.io/tls Secret with the brokers' certificate (tls.crt), valid "
                "for NAME-N.NAME-brokers.NAMESPACE.svc (e.g. *.NAME-brokers.NAMESPACE.svc), "
                "and its key (tls.key); its ca.crt, when present, is the CA the operator "
                "trusts to verify the brokers (else the system's CAs)",
                minLength=1,
            ),
            "clientAuth": _str(
                "Client certificates: none; requested (checked when offered); required "
                "(mutual TLS: no certificate, no connection)",
                enum=["none", "requested", "required"],
                default="none",
            ),
            "trustedCASecret": _secret_key_ref(
                "The CA certificates client certificates must chain to (default: the ca.crt "
                "of secretName); used when clientAuth is not none",
                "ca.crt",
            ),
            "operatorClientSecret": _str(
                "A kubernetes.io/tls Secret whose certificate (signed by a trusted CA, for "
                "client authentication) the operator presents to the brokers; required "
                "when clientAuth is required",
                minLength=1,
            ),
        },
        "TLS on the brokers' gRPC port; a renewed certificate takes a rolling restart",
        required=["secretName"],
    )
    schema["x-kubernetes-validations"] = [
        {
            "rule": "!has(self.clientAuth) || self.clientAuth != 'required' || "
            "has(self.operatorClientSecret)",
            "message": "clientAuth: required needs operatorClientSecret: the operator calls "
            "every broker (restarts, scale-downs, topics) and must present a certificate",
        }
    ]
    return schema


def _authentication_schema() -> Schema:
    return _obj(
        {
            "tokenSecret": _secret_key_ref(
                "The bearer token every client must send (authorization: Bearer TOKEN); "
                "the operator reads it to call the brokers",
                "token",
            )
        },
        "Who may call the brokers: a bearer token on every call but health checks (use "
        "it with tls: without TLS the token crosses the network in clear)",
        required=["tokenSecret"],
    )


def _cluster_spec() -> Schema:
    resource_list = {
        "type": "object",
        "additionalProperties": _quantity("A quantity"),
    }
    schema = _obj(
        {
            "brokers": _int(
                "How many brokers (StatefulSet pods); the scale subresource's replicas",
                minimum=1,
                maximum=64,
                default=3,
            ),
            # No defaults: the operator's configuration (the chart's image) fills them in.
            "image": _str(
                "The tierlog image the brokers run (default: the operator's, which the "
                "chart sets from image.repository and image.tag)",
                minLength=1,
            ),
            "imagePullPolicy": _str(
                "The brokers' image pull policy (default: the operator's, the chart's "
                "image.pullPolicy)",
                enum=["Always", "IfNotPresent", "Never"],
            ),
            "imagePullSecrets": {
                "type": "array",
                "description": "Secrets (in the cluster's namespace) the brokers' image is "
                "pulled with; replaces the operator's (the chart's imagePullSecrets)",
                "items": _obj({"name": _str("The Secret's name", minLength=1)}, required=["name"]),
            },
            "storage": _storage_schema(),
            "tier": _tier_schema(),
            "logDefaults": log_defaults_schema(),
            "fsync": _obj(
                {
                    "policy": _str(
                        "perBatch: fsync every produced batch before answering; interval: "
                        "group commit every intervalMs; pageCache: leave it to the OS",
                        enum=["perBatch", "interval", "pageCache"],
                        default="interval",
                    ),
                    "intervalMs": _int("The interval policy's period", minimum=1, default=1000),
                },
                "When appended data is forced to disk",
                default={},
            ),
            "resources": _obj(
                {"requests": resource_list, "limits": resource_list},
                "CPU and memory of each broker container",
                default={},
            ),
            "template": _obj({"pod": _pod_template_schema()}, "Pod template overrides", default={}),
            "metrics": _obj(
                {
                    "serviceMonitor": _obj(
                        {
                            "enabled": _bool(
                                "Create a ServiceMonitor (when its CRD exists)", False
                            ),
                            "interval": _str("The scrape interval", default="30s"),
                            "labels": _string_map("Labels a Prometheus selects monitors by"),
                        },
                        default={},
                    )
                },
                "Prometheus scraping of the brokers' /metrics",
                default={},
            ),
            "networkPolicy": _obj(
                {
                    "enabled": _bool("Admit only the listed clients and Prometheus", False),
                    "allowedClients": {
                        "type": "array",
                        "description": (
                            "Pod selectors (in any namespace) allowed to the gRPC and Kafka ports"
                        ),
                        "items": _opaque("A metav1 LabelSelector"),
                    },
                },
                "A NetworkPolicy in front of the brokers",
                default={},
            ),
            "tls": _tls_schema(),
            "authentication": _authentication_schema(),
            "serviceAccountName": _str(
                "The broker pods' ServiceAccount (e.g. one bound to a cloud identity for "
                "S3); empty: the namespace's default",
                pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
            ),
            "deletionPolicy": _str(
                "What deleting the cluster does to the tier's bucket data: Retain keeps it, "
                "Delete removes it",
                enum=["Retain", "Delete"],
                default="Retain",
            ),
            "replication": _replication_schema(),
        },
        "The desired cluster",
    )
    schema["x-kubernetes-validations"] = [
        {
            "rule": "!has(self.replication) || self.replication.factor <= self.brokers",
            "message": "replication.factor cannot exceed brokers: each replica of a partition "
            "is on a broker of its own",
        },
        {
            "rule": "(has(self.tier) && has(self.tier.cache)) == "
            "(has(oldSelf.tier) && has(oldSelf.tier.cache))",
            "message": _CACHE_FIXED,
        },
        {
            "rule": "has(self.replication) == has(oldSelf.replication)",
            "message": "replication cannot be switched on or off once the cluster exists "
            "(its topics' state lives in a different place)",
        },
    ]
    return schema


def _replication_schema() -> Schema:
    schema = _obj(
        {
            "factor": _int(
                "Replicas of each partition of a topic created without a replication "
                "factor (the brokers' default.replication.factor)",
                minimum=1,
                maximum=64,
                default=3,
            ),
            "minInsyncReplicas": _int(
                "In-sync replicas an acks=all write needs (the brokers' "
                "min.insync.replicas; a topic's own config overrides it)",
                minimum=1,
                maximum=64,
                default=2,
            ),
            "autoLeaderRebalance": _bool(
                "A partition's preferred replica (its first) leads again once it is back "
                "in sync (the brokers' and controller's auto.leader.rebalance.enable)",
                True,
            ),
        },
        "Replication: each partition on several brokers, a leader elected by the "
        "operator's controller from the in-sync replicas when its broker's lease expires. "
        "Without it each partition lives on one broker and a scale-down drains through the "
        "tier",
    )
    schema["x-kubernetes-validations"] = [
        {
            "rule": "self.minInsyncReplicas <= self.factor",
            "message": "minInsyncReplicas cannot exceed factor",
        }
    ]
    return schema


def _cluster_status() -> Schema:
    broker = _obj(
        {
            "id": _int("The broker id (the pod's ordinal)"),
            "pod": _str("The broker's pod"),
            "address": _str("Where clients reach it (host:port)"),
            "ready": {"type": "boolean", "description": "The pod reports ready"},
            "configHash": _str("The configuration the running pod was started with"),
            "state": _str("Running, Pending, Restarting, Draining or Missing"),
        },
        required=["id"],
    )
    return _obj(
        {
            "observedGeneration": _int("The spec generation last reconciled"),
            "conditions": _conditions_schema(),
            "replicas": _int("Brokers that exist (the scale subresource's status)"),
            "readyBrokers": _int("Brokers that are ready"),
            "selector": _str("The broker pods' label selector (for the scale subresource)"),
            "configHash": _str("The hash of the configuration the brokers should run"),
            "brokers": {"type": "array", "description": "Per-broker state", "items": broker},
            "assignment": {
                "type": "object",
                "description": "The partition assignment: topic -> the owning broker id of "
                "each partition, in partition order (-1: moving between brokers during a "
                "scale-down, served by nobody)",
                "additionalProperties": {"type": "array", "items": {"type": "integer"}},
            },
        },
        "What the operator last observed",
    )


def _condition_column(kind: str) -> dict[str, Any]:
    return {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        "description": f"Whether the {kind} is ready",
    }


def _crd(
    kind: str, plural: str, short_names: list[str], version: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "tierlog"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["tierlog"],
            },
            "scope": "Namespaced",
            "versions": [dict(version)],
        },
    }


def cluster_crd() -> dict[str, Any]:
    version = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": _obj(
                {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "spec": {**_cluster_spec(), "default": {}},
                    "status": _cluster_status(),
                },
                "A tierlog cluster: brokers in a StatefulSet, with their volumes, tier and "
                "settings",
            )
        },
        "subresources": {
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.brokers",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
        },
        "additionalPrinterColumns": [
            {"name": "Brokers", "type": "integer", "jsonPath": ".spec.brokers"},
            {"name": "Ready Brokers", "type": "integer", "jsonPath": ".status.readyBrokers"},
            _condition_column("cluster"),
            {
                "name": "Reason",
                "type": "string",
                "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
            },
            {"name": "Tier", "type": "string", "jsonPath": ".spec.tier.url", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    }
    return _crd(CLUSTER_KIND, "tierlogclusters", ["tlc"], version)


# --- the topic ---------------------------------------------------------------------------------


def _topic_spec() -> Schema:
    fixed = [{"rule": "self == oldSelf", "message": "cannot change once set"}]
    return _obj(
        {
            "cluster": _str(
                "The TierlogCluster (same namespace) that holds the topic",
                minLength=1,
                **{"x-kubernetes-validations": fixed},
            ),
            "topicName": _str(
                "The topic's name in tierlog (default: the object's name); Kafka's rules: "
                "[a-zA-Z0-9._-], at most 249 characters, not . or ..",
                pattern=r"^[a-zA-Z0-9._-]{1,249}$",
                **{
                    "x-kubernetes-validations": [
                        *fixed,
                        {"rule": "self != '.' && self != '..'", "message": "not . or .."},
                    ]
                },
            ),
            "partitions": _int(
                "How many partitions; can grow, never shrink (as in Kafka)",
                minimum=1,
                maximum=MAX_PARTITIONS,
                default=1,
                **{
                    "x-kubernetes-validations": [
                        {"rule": "self >= oldSelf", "message": "partitions can only grow"}
                    ]
                },
            ),
            "config": {
                **topic_config_schema(
                    "Topic config overrides under Kafka's names; the rest follow the "
                    "cluster's logDefaults"
                ),
                "default": {},
            },
        },
        "The desired topic",
        required=["cluster"],
    )


def _topic_status() -> Schema:
    return _obj(
        {
            "observedGeneration": _int("The spec generation last reconciled"),
            "conditions": _conditions_schema(),
            "topicName": _str("The topic's name in tierlog"),
            "partitions": _int("Partitions the brokers have"),
            "config": _string_map("The overrides the brokers hold"),
        },
        "What the operator last observed",
    )


def topic_crd() -> dict[str, Any]:
    version = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": _obj(
                {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "spec": _topic_spec(),
                    "status": _topic_status(),
                },
                "A topic of a tierlog cluster",
                required=["spec"],
            )
        },
        "subresources": {"status": {}},
        "additionalPrinterColumns": [
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.cluster"},
            {"name": "Partitions", "type": "integer", "jsonPath": ".spec.partitions"},
            _condition_column("topic"),
            {"name": "Topic", "type": "string", "jsonPath": ".status.topicName", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    }
    return _crd(TOPIC_KIND, "tierlogtopics", ["tlt"], version)


# --- kopf's peering ---------------------------------------------------------------------------


def peering_crds() -> list[dict[str, Any]]:
    """kopf's peering kinds (``kopf.dev/v1``): where operator replicas announce themselves,
    so that one of several is active. Their status is kopf's own, kept as written."""
    schema = _obj(
        {"status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        "kopf's record of the operators that peer here",
    )
    crds = []
    for kind, scope in (("ClusterKopfPeering", "Cluster"), ("KopfPeering", "Namespaced")):
        plural = kind.lower() + "s"
        crds.append(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.kopf.dev"},
                "spec": {
                    "group": "kopf.dev",
                    "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                    "scope": scope,
                    "versions": [
                        {
                            "name": "v1",
                            "served": True,
                            "storage": True,
                            "schema": {"openAPIV3Schema": schema},
                        }
                    ],
                },
            }
        )
    return crds


# --- files -------------------------------------------------------------------------------------


class _PlainDumper(yaml.SafeDumper):
    """YAML without anchors and aliases (a shared rule object is written out each time)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_crds() -> dict[str, str]:
    """File name -> YAML text of each CRD, exactly as committed."""
    header = "# Generated by `python -m tierlog.operator.crds` (make crds); do not edit.\n"
    return {
        f"{crd['metadata']['name']}.yaml": header
        + yaml.dump(crd, Dumper=_PlainDumper, sort_keys=False, width=100)
        for crd in (cluster_crd(), topic_crd(), *peering_crds())
    }


def write_crds(root: Path) -> list[Path]:
    """Write every CRD file under ``root`` (the checkout); the paths written."""
    written = []
    for directory in CRD_DIRS:
        (root / directory).mkdir(parents=True, exist_ok=True)
        for name, text in render_crds().items():
            path = root / directory / name
            path.write_text(text)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the CRD YAML files from their source.")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout")
    args = parser.parse_args(argv)
    for path in write_crds(args.root):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
