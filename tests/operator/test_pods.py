"""Reading a broker pod: its id, readiness, version and where its sidecar answers."""

from __future__ import annotations

from typing import Any

from tierlog.operator.pods import broker_pod


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "demo-2",
            "labels": {"apps.kubernetes.io/pod-index": "2"},
            "annotations": {"tierlog.io/config-hash": "abc"},
        },
        "spec": {"containers": [{"ports": [{"name": "grpc", "containerPort": 9092}]}]},
        "status": status,
    }


def test_a_ready_pod() -> None:
    broker = broker_pod(pod(podIP="10.0.0.7", conditions=[{"type": "Ready", "status": "True"}]))
    assert broker is not None
    assert (broker.broker_id, broker.ready, broker.config_hash) == (2, True, "abc")
    assert broker.address == "10.0.0.7:9092"


def test_a_pod_without_an_ip_or_readiness() -> None:
    broker = broker_pod(pod())
    assert broker is not None
    assert (broker.ready, broker.address, broker.deleting) == (False, "", False)


def test_the_id_falls_back_to_the_name() -> None:
    body = pod()
    del body["metadata"]["labels"]["apps.kubernetes.io/pod-index"]
    broker = broker_pod(body)
    assert broker is not None and broker.broker_id == 2
