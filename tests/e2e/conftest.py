"""The one-node cluster for the end-to-end tests (``make e2e``), and how a test reads it.

The session starts the node with ``tests.support.cluster`` unless one already runs (a
developer's ``make cluster``): then it is reused and left running. ``up`` rebuilds the
image from the checkout either way, so the pods run the code under test. The chart's
operator and a MinIO the pods reach are installed once per session too; each module
makes its own ``TierlogCluster`` in a namespace of its own.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.charts.helm import CHART, helm
from tests.support.cluster import daemons
from tests.support.cluster.layout import GATEWAY, Layout
from tests.support.cluster.node import down, free_released_volumes, kubectl, up
from tests.support.minio import MinioServer

# The documented release and namespace: the chart keeps its CRDs on uninstall, labelled
# with the release that made them, so only that release can take them back.
RELEASE, OPERATOR_NAMESPACE = "tierlog", "tierlog-system"


@dataclass(frozen=True)
class Node:
    layout: Layout
    image: str  # repository:tag of the tierlog image loaded into the node

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """kubectl as the admin; a failure shows its output. Bounded at 5 minutes, above
        the tests' own ``--timeout=180s`` (a namespace's deletion, a rollout)."""
        done = kubectl(self.layout, *args, input=input, timeout_s=300)
        if done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def story(self, namespace: str) -> str:
        """The namespace's events and every pod's log: what a red run prints."""
        parts = [self._quiet("get", "events", "-n", namespace, "--sort-by=.lastTimestamp")]
        pods = self._quiet("get", "pods", "-n", namespace, "-o", "name").split()
        for pod in pods:
            logs = self._quiet("logs", "-n", namespace, pod, "--all-containers", "--tail=60")
            parts.append(f"--- {pod}:\n{logs}")
        return "\n".join(parts)

    def wait(self, namespace: str, condition: str, target: str, timeout_s: int = 300) -> None:
        """``kubectl wait``; on a timeout the assertion carries ``story(namespace)``."""
        scope = ["-n", namespace] if namespace else []  # "": a cluster-scoped target
        done = kubectl(
            self.layout, "wait", *scope, condition, target, f"--timeout={timeout_s}s",
            timeout_s=timeout_s + 30,
        )  # fmt: skip
        if done.returncode != 0:
            raise AssertionError(
                f"{target} not {condition}: {done.stderr}\n{self.story(namespace)}"
            )

    def create_namespace(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.kubectl("create", "namespace", name)
        return name

    def delete_namespace(self, name: str) -> None:
        """Delete it (waited for), then free the local volumes its claims held."""
        volumes = [
            volume["metadata"]["name"]
            for volume in json.loads(self.kubectl("get", "pv", "-o", "json"))["items"]
            if (volume["spec"].get("claimRef") or {}).get("namespace") == name
        ]
        self.kubectl("delete", "namespace", name, "--timeout=180s")
        for volume in volumes:  # the PV controller marks them once their claims are gone
            self.wait("", "--for=jsonpath={.status.phase}=Released", f"pv/{volume}", 60)
        free_released_volumes(self.layout)

    def helm(self, *args: str, check: bool = True) -> str:
        """helm on the release's namespace as the admin."""
        kubeconfig = f"--kubeconfig={self.layout.admin_kubeconfig}"
        done = helm(*args, "-n", OPERATOR_NAMESPACE, kubeconfig, check=check)
        return done.stdout

    def install_operator(self) -> None:
        """``helm install`` of the chart with the node's image, as docs/KUBERNETES.md says;
        returns once the operator is Available."""
        repository, tag = self.image.rsplit(":", 1)
        self.helm(
            "install", RELEASE, str(CHART), "--create-namespace",
            "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        )  # fmt: skip
        self.wait(OPERATOR_NAMESPACE, "--for=condition=Available", "deployment/tierlog-operator")

    def _quiet(self, *args: str) -> str:
        done = kubectl(self.layout, *args)
        return done.stdout + done.stderr


@pytest.fixture(scope="session")
def one_node() -> Iterator[Node]:
    layout = Layout.default()
    started_here = not daemons.is_running(layout, "kube-apiserver")
    try:
        image = up(layout)
    except BaseException:
        if started_here:
            down(layout)
        raise
    try:
        yield Node(layout, image)
    finally:
        if started_here:
            down(layout)


@pytest.fixture(scope="session")
def operator(one_node: Node) -> Iterator[str]:
    """The chart's operator, installed once for the session; its namespace."""
    one_node.install_operator()
    try:
        yield OPERATOR_NAMESPACE
    finally:
        one_node.helm("uninstall", RELEASE, "--wait", check=False)
        one_node.kubectl("delete", "namespace", OPERATOR_NAMESPACE, "--timeout=180s")


@pytest.fixture(scope="session")
def tier(one_node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """A real MinIO on the bridge address (so after the node made it), where pods reach it."""
    server = MinioServer(tmp_path_factory.mktemp("minio") / "data", host=GATEWAY).start()
    try:
        yield server
    finally:
        server.stop()


__all__ = ["OPERATOR_NAMESPACE", "RELEASE", "Node", "one_node", "operator", "tier"]
