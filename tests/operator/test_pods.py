"""Reading a broker pod: its id, readiness, version, where its sidecar answers and the
Secrets its TLS and token come from."""

from __future__ import annotations

from typing import Any

from tierlog.operator.pods import broker_pod
from tierlog.operator.render.statefulset import pod_template
from tierlog.operator.spec import ClusterSpec, SecretKeyRef


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "demo-2",
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


def test_the_id_is_the_ordinal_ending_the_name_whatever_the_labels_say() -> None:
    """As the pod's own sidecar reads it (Kubernetes 1.27 sets no pod-index label)."""
    body = pod()
    body["metadata"]["labels"] = {"apps.kubernetes.io/pod-index": "7"}
    broker = broker_pod(body)
    assert broker is not None and broker.broker_id == 2


def test_a_pod_whose_name_has_no_ordinal_is_no_broker() -> None:
    body = pod()
    body["metadata"]["name"] = "demo-debug"
    assert broker_pod(body) is None


def test_the_secrets_a_pod_was_started_with() -> None:
    """Read from the pod's own volumes (as rendered), not from the spec of now: a pod
    started before TLS was turned on still speaks plaintext."""
    secured = ClusterSpec.from_resource(
        {
            "metadata": {"name": "demo", "namespace": "ns"},
            "spec": {
                "tls": {"secretName": "demo-tls"},
                "authentication": {"tokenSecret": {"name": "demo-auth", "key": "t"}},
            },
        }
    )
    body = pod()
    body["spec"] = pod_template(secured)["spec"]
    broker = broker_pod(body)
    assert broker is not None
    assert (broker.tls_secret, broker.token_secret) == ("demo-tls", SecretKeyRef("demo-auth", "t"))
    plain = broker_pod(pod())
    assert plain is not None and (plain.tls_secret, plain.token_secret) == ("", None)
