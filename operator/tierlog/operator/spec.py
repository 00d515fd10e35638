"""A ``TierlogCluster`` as a value: the custom resource's spec, read once and typed.

The API server has already validated and defaulted the spec against the CRD's schema
(``crds.py``); reading here only turns the JSON into frozen dataclasses the renderers
take, and fills the same defaults for the unit tests' hand-written specs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from tierlog.operator.config import BrokerImage
from tierlog.storage.errors import InvalidConfigError

__all__ = [
    "ClusterSpec",
    "CredentialsRef",
    "Fsync",
    "PodOverrides",
    "Replication",
    "SecretKeyRef",
    "Tier",
    "TierCache",
    "Tls",
    "TopicSpec",
    "kafka_value",
]


@dataclass(frozen=True)
class CredentialsRef:
    secret_name: str
    access_key_id_key: str = "AWS_ACCESS_KEY_ID"
    secret_access_key_key: str = "AWS_SECRET_ACCESS_KEY"


# A cache volume's size as the CRD admits it: whole Mi, Gi, Ti, Pi (or M, G, T, P).
_SIZE_UNITS = {"Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50}
_SIZE_UNITS |= {"M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
CACHE_SIZE_PATTERN = r"^[1-9][0-9]{0,5}(Mi|Gi|Ti|Pi|M|G|T|P)$"
# The share of a cache volume its chunk cache leaves to the file system: ext4 keeps 5%
# for root (the sidecar is not root) and spends more on its journal and inode tables,
# and a chunk's trailer takes a block of its own. The cache never exceeds the rest.
CACHE_HEADROOM_PERCENT = 15


@dataclass(frozen=True)
class TierCache:
    """``spec.tier.cache``: a volume of each broker's own for the tier's chunk cache."""

    size: str  # a quantity, as CACHE_SIZE_PATTERN admits
    storage_class: str | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(CACHE_SIZE_PATTERN, self.size):
            raise InvalidConfigError(
                f"tier.cache.size {self.size!r}: a whole number of Mi, Gi, Ti, Pi (or M, G, "
                "T, P) is expected"
            )

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> TierCache:
        return cls(str(spec["size"]), spec.get("storageClassName") or None)

    @property
    def max_bytes(self) -> int:
        """The chunk cache's byte limit: the volume less the file system's share."""
        digits = self.size.rstrip("MGTPi")
        volume_bytes = int(digits) * _SIZE_UNITS[self.size[len(digits) :]]
        return volume_bytes * (100 - CACHE_HEADROOM_PERCENT) // 100


@dataclass(frozen=True)
class Tier:
    url: str
    endpoint: str = ""
    region: str = "us-east-1"
    force_path_style: bool = False
    credentials: CredentialsRef | None = None
    shared_claim: str = ""  # a file:// tier's volume, mounted in every broker pod
    # Brokers on empty volumes create the topics the bucket records and go on from the
    # tier's end (``tierlog.tier.restore``): a cluster restored from a lost one's bucket.
    restore: bool = False
    cache: TierCache | None = None  # None: the chunk cache lives on the data volume

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Tier:
        s3 = spec.get("s3") or {}
        secret = s3.get("credentialsSecret")
        credentials = None
        if secret:
            credentials = CredentialsRef(
                secret["name"],
                secret.get("accessKeyIdKey", "AWS_ACCESS_KEY_ID"),
                secret.get("secretAccessKeyKey", "AWS_SECRET_ACCESS_KEY"),
            )
        return cls(
            url=spec["url"],
            endpoint=s3.get("endpoint", ""),
            region=s3.get("region", "us-east-1"),
            force_path_style=bool(s3.get("forcePathStyle", False)),
            credentials=credentials,
            shared_claim=(spec.get("sharedVolume") or {}).get("claimName", ""),
            restore=bool(spec.get("restore", False)),
            cache=TierCache.from_spec(spec["cache"]) if spec.get("cache") else None,
        )

    @property
    def shared_path(self) -> str:
        """Where a file:// tier's directory is (its volume is mounted there)."""
        return unquote(urlsplit(self.url).path)


@dataclass(frozen=True)
class Fsync:
    policy: str = "interval"  # perBatch | interval | pageCache
    interval_ms: int = 1000


@dataclass(frozen=True)
class PodOverrides:
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, Any] | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    priority_class_name: str = ""


_OPERATOR_DEFAULTS = BrokerImage()  # a bare operator's (the tests' hand-written specs)


@dataclass(frozen=True)
class SecretKeyRef:
    name: str
    key: str

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], default_key: str) -> SecretKeyRef:
        return cls(spec["name"], spec.get("key", default_key))


@dataclass(frozen=True)
class Tls:
    """``spec.tls``: the brokers' certificate, client certificates, the operator's own."""

    secret_name: str  # kubernetes.io/tls: tls.crt, tls.key, maybe ca.crt
    client_auth: str = "none"  # none | requested | required
    trusted_ca: SecretKeyRef | None = None  # None: ca.crt of secret_name
    operator_client_secret: str = ""  # kubernetes.io/tls, for mutual TLS

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Tls:
        trusted = spec.get("trustedCASecret")
        return cls(
            secret_name=spec["secretName"],
            client_auth=spec.get("clientAuth", "none"),
            trusted_ca=SecretKeyRef.from_spec(trusted, "ca.crt") if trusted else None,
            operator_client_secret=spec.get("operatorClientSecret", ""),
        )

    @property
    def client_ca(self) -> SecretKeyRef:
        """Where the CAs that client certificates must chain to are."""
        return self.trusted_ca or SecretKeyRef(self.secret_name, "ca.crt")


@dataclass(frozen=True)
class Replication:
    """``spec.replication``: the brokers' ``default.replication.factor``,
    ``min.insync.replicas`` and ``auto.leader.rebalance.enable``; the partition state in
    the API server."""

    factor: int = 3
    min_insync_replicas: int = 2
    auto_leader_rebalance: bool = True

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Replication:
        return cls(
            int(spec.get("factor", 3)),
            int(spec.get("minInsyncReplicas", 2)),
            bool(spec.get("autoLeaderRebalance", True)),
        )


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    namespace: str
    brokers: int = 3
    image: str = BrokerImage.image
    image_pull_policy: str = BrokerImage.pull_policy
    image_pull_secrets: tuple[str, ...] = ()
    storage_size: str = "10Gi"
    storage_class: str | None = None
    tier: Tier | None = None
    log_defaults: Mapping[str, Any] = field(default_factory=dict)
    fsync: Fsync = Fsync()
    resources: Mapping[str, Any] = field(default_factory=dict)
    pod: PodOverrides = PodOverrides()
    service_monitor: bool = False
    service_monitor_interval: str = "30s"
    service_monitor_labels: Mapping[str, str] = field(default_factory=dict)
    network_policy: bool = False
    allowed_clients: tuple[Mapping[str, Any], ...] = ()
    deletion_policy: str = "Retain"
    tls: Tls | None = None
    token: SecretKeyRef | None = None  # spec.authentication.tokenSecret
    service_account_name: str = ""
    replication: Replication | None = None  # None: each partition on one broker

    @classmethod
    def from_resource(
        cls, body: Mapping[str, Any], defaults: BrokerImage = _OPERATOR_DEFAULTS
    ) -> ClusterSpec:
        """From the custom resource's body (``metadata`` and ``spec``); the image, its
        pull policy and pull Secrets are the operator's ``defaults`` unless it names them."""
        metadata, spec = body["metadata"], body.get("spec") or {}
        storage = spec.get("storage") or {}
        fsync = spec.get("fsync") or {}
        pod = (spec.get("template") or {}).get("pod") or {}
        monitor = (spec.get("metrics") or {}).get("serviceMonitor") or {}
        network = spec.get("networkPolicy") or {}
        return cls(
            name=metadata["name"],
            namespace=metadata["namespace"],
            brokers=int(spec.get("brokers", 3)),
            image=spec.get("image") or defaults.image,
            image_pull_policy=spec.get("imagePullPolicy") or defaults.pull_policy,
            image_pull_secrets=(
                tuple(secret["name"] for secret in spec["imagePullSecrets"])
                if "imagePullSecrets" in spec
                else defaults.pull_secrets
            ),
            storage_size=str(storage.get("size", "10Gi")),
            storage_class=storage.get("storageClassName") or None,
            tier=Tier.from_spec(spec["tier"]) if spec.get("tier") else None,
            log_defaults=dict(spec.get("logDefaults") or {}),
            fsync=Fsync(fsync.get("policy", "interval"), int(fsync.get("intervalMs", 1000))),
            resources=dict(spec.get("resources") or {}),
            pod=PodOverrides(
                labels=dict(pod.get("labels") or {}),
                annotations=dict(pod.get("annotations") or {}),
                affinity=pod.get("affinity"),
                tolerations=tuple(pod.get("tolerations") or ()),
                priority_class_name=pod.get("priorityClassName", ""),
            ),
            service_monitor=bool(monitor.get("enabled", False)),
            service_monitor_interval=monitor.get("interval", "30s"),
            service_monitor_labels=dict(monitor.get("labels") or {}),
            network_policy=bool(network.get("enabled", False)),
            allowed_clients=tuple(network.get("allowedClients") or ()),
            deletion_policy=spec.get("deletionPolicy", "Retain"),
            tls=Tls.from_spec(spec["tls"]) if spec.get("tls") else None,
            token=_token_ref(spec.get("authentication") or {}),
            service_account_name=spec.get("serviceAccountName", ""),
            replication=(
                Replication.from_spec(spec["replication"]) if "replication" in spec else None
            ),
        )


def _token_ref(authentication: Mapping[str, Any]) -> SecretKeyRef | None:
    secret = authentication.get("tokenSecret")
    return SecretKeyRef.from_spec(secret, "token") if secret else None


@dataclass(frozen=True)
class TopicSpec:
    name: str  # the topic's name in tierlog
    cluster: str
    partitions: int
    configs: Mapping[str, str]  # Kafka names -> the strings the admin API takes

    @classmethod
    def from_resource(cls, body: Mapping[str, Any]) -> TopicSpec:
        spec = body["spec"]
        return cls(
            name=spec.get("topicName") or body["metadata"]["name"],
            cluster=spec["cluster"],
            partitions=int(spec.get("partitions", 1)),
            configs={key: kafka_value(value) for key, value in (spec.get("config") or {}).items()},
        )

    @property
    def tiered(self) -> bool:
        """Whether its partitions go to the cluster's tier (``remote.storage.enable``)."""
        return self.configs.get("remote.storage.enable", "false").lower() == "true"


def kafka_value(value: object) -> str:
    """A config value as Kafka writes it: ``true``/``false`` for booleans, else ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
