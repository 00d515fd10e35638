"""The path a user walks, on a real node: ``helm install`` of the chart with the image
built from the ``Dockerfile``, a 3-broker ``TierlogCluster`` whose claims bind, and a Job
in the cluster producing and consuming through the brokers' per-pod DNS names."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.charts.helm import CHART, helm
from tests.e2e.conftest import Node

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
RECORDS = 1000


@pytest.fixture
def operator(one_node: Node) -> Iterator[str]:
    """The chart installed with the node's image, as docs/KUBERNETES.md says; its namespace.

    Release and namespace are the documented ones: the chart keeps its CRDs on uninstall,
    labelled with the release that made them, so only that release can take them back.
    """
    namespace, kubeconfig = "tierlog-system", f"--kubeconfig={one_node.layout.admin_kubeconfig}"
    repository, tag = one_node.image.rsplit(":", 1)
    helm(
        "install", "tierlog", CHART, "-n", namespace, "--create-namespace", kubeconfig,
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
    )  # fmt: skip
    try:
        one_node.wait(namespace, "--for=condition=Available", "deployment/tierlog-operator")
        yield namespace
    finally:
        helm("uninstall", "tierlog", "-n", namespace, kubeconfig, "--wait", check=False)
        one_node.kubectl("delete", "namespace", namespace, "--timeout=180s")


def _job(servers: str, image: str) -> dict[str, object]:
    script = (
        f"tierlog perf produce --num-records {RECORDS} --record-size 100 --throughput -1 orders"
        f" && tierlog consume --from-beginning --max-messages {RECORDS} --timeout-ms 60000"
        " orders | wc -l"
    )
    container = {
        "name": "client",
        "image": image,
        "env": [{"name": "TIERLOG_SERVER", "value": servers}],
        "command": ["sh", "-c", script],
        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "produce-consume"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": {"runAsUser": 10001, "runAsNonRoot": True},
                    "containers": [container],
                }
            },
        },
    }


def test_a_three_broker_cluster_binds_its_claims_and_serves_a_job_by_dns_names(
    one_node: Node, operator: str
) -> None:
    namespace = one_node.create_namespace("brokers")
    try:
        cluster = yaml.safe_load(
            (REPO / "deploy" / "examples" / "cluster-minimal.yaml").read_text()
        )
        started = time.monotonic()
        one_node.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(cluster))
        name = cluster["metadata"]["name"]
        one_node.wait(namespace, "--for=condition=Ready", f"tierlogcluster/{name}")
        print(f"\n3-broker cluster Ready {time.monotonic() - started:.1f} s after kubectl apply")

        claims = json.loads(one_node.kubectl("get", "pvc", "-n", namespace, "-o", "json"))
        assert sorted(c["status"]["phase"] for c in claims["items"]) == ["Bound"] * 3

        topic = {
            "apiVersion": "tierlog.io/v1alpha1",
            "kind": "TierlogTopic",
            "metadata": {"name": "orders"},
            "spec": {"cluster": name, "partitions": 3},
        }
        one_node.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(topic))
        one_node.wait(namespace, "--for=condition=Ready", "tierlogtopic/orders")

        # The per-broker names of the headless Service, resolved by the cluster's DNS.
        servers = ",".join(f"{name}-{i}.{name}-brokers:9092" for i in range(3))
        job = _job(servers, one_node.image)
        one_node.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(job))
        one_node.wait(namespace, "--for=condition=Complete", "job/produce-consume")
        output = one_node.kubectl("logs", "-n", namespace, "job/produce-consume")
        assert f"{RECORDS} records sent" in output, one_node.story(namespace)
        assert output.strip().splitlines()[-1] == str(RECORDS), one_node.story(namespace)
    finally:
        # Waited for: the operator (still installed) removes its finalizers.
        one_node.kubectl("delete", "namespace", namespace, "--timeout=180s")
