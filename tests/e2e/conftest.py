"""The one-node cluster for the end-to-end tests (``make e2e``), and how a test reads it.

The session starts the node with ``tests.support.cluster`` unless one already runs (a
developer's ``make cluster``): then it is reused and left running. ``up`` rebuilds the
image from the checkout either way, so the pods run the code under test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.charts.helm import CHART, helm
from tests.support.cluster import daemons
from tests.support.cluster.layout import Layout
from tests.support.cluster.node import down, kubectl, up


@dataclass(frozen=True)
class Node:
    layout: Layout
    image: str  # repository:tag of the tierlog image loaded into the node

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """kubectl as the admin; a failure shows its output."""
        done = kubectl(self.layout, *args, input=input)
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
        done = kubectl(
            self.layout, "wait", "-n", namespace, condition, target, f"--timeout={timeout_s}s"
        )
        if done.returncode != 0:
            raise AssertionError(
                f"{target} not {condition}: {done.stderr}\n{self.story(namespace)}"
            )

    def create_namespace(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.kubectl("create", "namespace", name)
        return name

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


@pytest.fixture(scope="module")
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


__all__ = ["Node", "one_node", "operator"]
