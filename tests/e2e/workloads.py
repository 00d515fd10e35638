"""What the end-to-end tests put on the node: clusters, topics, and Jobs of the image
producing and consuming through the brokers' per-pod DNS names."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tests.e2e.conftest import Node
from tests.support.minio import MinioServer

__all__ = [
    "RECORDS",
    "Brokers",
    "SecretMount",
    "apply",
    "count_records",
    "finish_job",
    "make_topic",
    "produce_records",
    "run_job",
    "start_job",
    "tiered_cluster",
]

RECORDS = 1000


@dataclass(frozen=True)
class Brokers:
    namespace: str
    name: str  # the TierlogCluster's
    count: int = 3
    bucket: str = ""  # of a tiered cluster, whose objects are under "NAME/"

    @property
    def servers(self) -> str:
        """The per-broker names of the headless Service, as clients in the cluster use them."""
        return ",".join(f"{self.name}-{i}.{self.name}-brokers:9092" for i in range(self.count))

    @property
    def qualified_servers(self) -> str:
        """The same names, fully qualified: what a TLS client dials, since gRPC takes no
        wildcard over a single label (``*.NAME-brokers``) for the short ones."""
        return ",".join(
            f"{self.name}-{i}.{self.name}-brokers.{self.namespace}.svc:9092"
            for i in range(self.count)
        )

    @property
    def selector(self) -> str:
        """The label selector of its broker pods."""
        return f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component=broker"


def apply(node: Node, namespace: str, *manifests: dict[str, Any]) -> None:
    for manifest in manifests:
        node.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))


def make_topic(
    node: Node,
    brokers: Brokers,
    topic: str,
    config: dict[str, object] | None = None,
    partitions: int = 3,
) -> None:
    """A ``TierlogTopic``, waited for until every broker has it."""
    manifest = {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogTopic",
        "metadata": {"name": topic},
        "spec": {"cluster": brokers.name, "partitions": partitions, "config": config or {}},
    }
    apply(node, brokers.namespace, manifest)
    node.wait(brokers.namespace, "--for=condition=Ready", f"tierlogtopic/{topic}")


@dataclass(frozen=True)
class SecretMount:
    """A Secret a Job's client reads, mounted read-only at ``path``."""

    volume: str
    secret: dict[str, Any]  # the volume's ``secret`` source (secretName, items...)
    path: str


def start_job(
    node: Node,
    brokers: Brokers,
    name: str,
    script: str,
    *,
    servers: str | None = None,
    env: Mapping[str, str] | None = None,
    secrets: Sequence[SecretMount] = (),
) -> None:
    """A Job of the node's image running ``script`` with ``TIERLOG_SERVER`` set (to
    ``servers``, by default the brokers' short names), ``env`` and ``secrets`` mounted."""
    variables = {"TIERLOG_SERVER": servers or brokers.servers, **(env or {})}
    container: dict[str, Any] = {
        "name": "client",
        "image": node.image,
        "env": [{"name": key, "value": value} for key, value in variables.items()],
        "command": ["sh", "-c", script],
        "volumeMounts": [
            {"name": mount.volume, "mountPath": mount.path, "readOnly": True} for mount in secrets
        ],
        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": {"runAsUser": 10001, "runAsNonRoot": True},
                    "containers": [container],
                    "volumes": [{"name": m.volume, "secret": m.secret} for m in secrets],
                }
            },
        },
    }
    apply(node, brokers.namespace, job)


def finish_job(
    node: Node, brokers: Brokers, name: str, timeout_s: int = 300, outcome: str = "Complete"
) -> str:
    """Wait for the Job's ``outcome`` (Complete, or Failed); its log."""
    node.wait(brokers.namespace, f"--for=condition={outcome}", f"job/{name}", timeout_s)
    return node.kubectl("logs", "-n", brokers.namespace, f"job/{name}")


def run_job(node: Node, brokers: Brokers, name: str, script: str) -> str:
    start_job(node, brokers, name, script)
    return finish_job(node, brokers, name)


def produce_records(topic: str, records: int = RECORDS, per_second: int = -1) -> str:
    """Exits non-zero unless every record was acknowledged; prints ``N records sent``."""
    return (
        f"tierlog perf produce --num-records {records} --record-size 100"
        f" --throughput {per_second} {topic}"
    )


def count_records(topic: str, records: int = RECORDS, group: str = "") -> str:
    """Prints how many records a consumer from the beginning gets (it stops at
    ``records``); with ``group``, as that group's consumer, committing what it read."""
    as_group = f" --group {group}" if group else ""
    return (
        f"tierlog consume --from-beginning --max-messages {records} --timeout-ms 60000"
        f"{as_group} {topic} | wc -l"
    )


@contextmanager
def tiered_cluster(
    node: Node,
    tier: MinioServer,
    prefix: str,
    endpoint: str | None = None,
    *,
    bucket: str = "",
    spec: Mapping[str, Any] | None = None,
    restore: bool = False,
) -> Iterator[Brokers]:
    """A Ready 3-broker cluster tiering to its own bucket of ``tier`` (through
    ``endpoint``, a proxy, when given; ``bucket``, an existing one, when given), with
    ``spec`` added to its spec (and ``spec.tier.restore`` set with ``restore``), in a
    namespace of its own (deleted after, its volumes freed)."""
    namespace = node.create_namespace(prefix)
    bucket = bucket or tier.create_bucket(prefix)
    credentials = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "tier-keys"},
        "stringData": {
            "AWS_ACCESS_KEY_ID": tier.access_key_id,
            "AWS_SECRET_ACCESS_KEY": tier.secret_access_key,
        },
    }
    cluster = {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogCluster",
        "metadata": {"name": prefix},
        "spec": {
            "brokers": 3,
            "tier": {
                "url": f"s3://{bucket}/{prefix}",
                "s3": {
                    "endpoint": endpoint or tier.endpoint_url,
                    "region": tier.region,
                    "forcePathStyle": True,
                    "credentialsSecret": {"name": "tier-keys"},
                },
                **({"restore": True} if restore else {}),
            },
            **(spec or {}),
        },
    }
    try:
        started = time.monotonic()
        apply(node, namespace, credentials, cluster)
        node.wait(namespace, "--for=condition=Ready", f"tierlogcluster/{prefix}")
        print(f"\n{prefix}: 3 brokers Ready {time.monotonic() - started:.1f} s after kubectl apply")
        yield Brokers(namespace, prefix, bucket=bucket)
    finally:
        node.delete_namespace(namespace)
