"""Cluster specs the renderers' tests share: the defaults, and one with every option."""

from __future__ import annotations

import pytest

from tierlog.operator.render.common import Owner
from tierlog.operator.spec import ClusterSpec


def resource(**spec: object) -> dict[str, object]:
    return {"metadata": {"name": "events", "namespace": "prod", "uid": "u-1"}, "spec": spec}


@pytest.fixture
def owner() -> Owner:
    return Owner("events", "u-1")


@pytest.fixture
def bare() -> ClusterSpec:
    return ClusterSpec.from_resource(resource())


@pytest.fixture
def full() -> ClusterSpec:
    return ClusterSpec.from_resource(
        resource(
            brokers=4,
            image="registry.example/tierlog:1.2",
            storage={"size": "50Gi", "storageClassName": "fast"},
            tier={
                "url": "s3://bucket/prefix",
                "s3": {
                    "endpoint": "http://minio:9000",
                    "forcePathStyle": True,
                    "credentialsSecret": {"name": "s3-keys", "accessKeyIdKey": "id"},
                },
            },
            logDefaults={"log.retention.ms": 3600000, "log.preallocate": True},
            fsync={"policy": "perBatch"},
            resources={"requests": {"cpu": "500m"}, "limits": {"memory": "2Gi"}},
            template={
                "pod": {
                    "labels": {"team": "data", "app.kubernetes.io/instance": "hijack"},
                    "annotations": {"note": "x"},
                    "affinity": {"nodeAffinity": {}},
                    "tolerations": [{"key": "k", "operator": "Exists"}],
                    "priorityClassName": "high",
                }
            },
            metrics={"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
            networkPolicy={"enabled": True, "allowedClients": [{"matchLabels": {"c": "1"}}]},
        )
    )
