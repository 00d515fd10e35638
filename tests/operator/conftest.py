"""The operator's tests: the CRDs in the session's API server (tests/support/kube.py), the
operator as a process, and real sidecars standing in for the brokers' pods."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.kube import ControlPlane
from tests.support.pod_network import PodPort
from tests.support.sidecars import SidecarProcess, Sidecars, console_script, free_port

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "deploy" / "base" / "crds"
EXAMPLES_DIR = REPO / "deploy" / "examples"


def install_crds(plane: ControlPlane) -> None:
    """Our CRDs, applied from the committed files, once established."""
    plane.kubectl("apply", "--server-side", "-k", str(CRD_DIR))
    plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/tierlogclusters.tierlog.io",
        "crd/tierlogtopics.tierlog.io",
    )


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> ControlPlane:
    """The control plane with our CRDs applied from the committed files and established."""
    install_crds(control_plane)
    return control_plane


# --- the operator as a process, and brokers without a kubelet ---------------------------------


@dataclass
class RunningOperator:
    """``tierlog-operator`` watching one namespace of the test API server."""

    namespace: str
    process: subprocess.Popen[bytes]
    log_path: Path
    health_url: str
    metrics_url: str

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def scrape(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as answer:
            text: str = answer.read().decode()
        return text

    def passes(self, kind: str = "TierlogCluster") -> tuple[int, int]:
        """How many passes of ``kind`` have started and how many have finished."""
        found = dict.fromkeys(("reconciliations_total", "reconcile_duration_seconds_count"), 0)
        for line in self.scrape().splitlines():
            name, _, rest = line.partition("{")
            series = name.removeprefix("tierlog_operator_")
            if series in found and rest.startswith(f'kind="{kind}"}}'):
                found[series] = int(float(rest.rpartition(" ")[2]))
        return found["reconciliations_total"], found["reconcile_duration_seconds_count"]

    @contextmanager
    def next_pass(self, kind: str = "TierlogCluster") -> Iterator[None]:
        """On leaving, wait until a pass of ``kind`` that started after entering has
        finished: whatever it would do about what changed inside (a restart, an Event) is
        done, and what it did not do, it would not. Inside, change something that wakes a
        pass, unless the object is in a state its passes poll. Only for a test with one
        object of ``kind`` (passes of one object never overlap)."""
        started, _ = self.passes(kind)
        yield
        wait_for(f"a {kind} pass", lambda: self.passes(kind)[1] > started)

    def wait_for_a_pass(self, kind: str = "TierlogCluster") -> None:
        """``next_pass`` of an object whose passes poll its brokers (a roll, a drain)."""
        with self.next_pass(kind):
            pass

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_operator(
    plane: ControlPlane, namespace: str, log_path: Path, *extra: str
) -> RunningOperator:
    health, metrics = free_port(), free_port()
    health_url = f"http://127.0.0.1:{health}/healthz"
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            [
                console_script("tierlog-operator"),
                f"--namespace={namespace}",
                f"--liveness={health_url}",
                f"--metrics-port={metrics}",
                "--metrics-address=127.0.0.1",
                *extra,
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": str(plane.kubeconfig)},
        )
    running = RunningOperator(
        namespace, process, log_path, health_url, f"http://127.0.0.1:{metrics}/metrics"
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the operator exited:\n{running.output}"
        try:
            with urllib.request.urlopen(health_url, timeout=2) as answer:
                if answer.status == 200:
                    return running
        except OSError:
            pass
        time.sleep(0.2)
    running.stop()
    raise AssertionError(f"the operator's liveness endpoint never answered:\n{running.output}")


@pytest.fixture
def operator(kube: ControlPlane, tmp_path: Path) -> Iterator[RunningOperator]:
    """The operator (standalone) on a fresh namespace of its own."""
    namespace = kube.create_namespace("op")
    running = start_operator(kube, namespace, tmp_path / "operator.log", "--standalone")
    try:
        yield running
    finally:
        running.stop()


def shared_file_tier(directory: Path) -> dict[str, Any]:
    """A ``file://`` tier on ``directory``, which the test's sidecars all reach as brokers
    reach a ReadWriteMany volume (the CRD asks for one; no kubelet mounts it here)."""
    return {"url": directory.as_uri(), "sharedVolume": {"claimName": "tier"}}


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 60) -> Any:
    """Poll ``check`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = check()
        except (AssertionError, KeyError, IndexError, TypeError, StopIteration):
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


# A broker pod whose sidecar runs on loopback and passes its readiness probe.
READY_POD_STATUS: dict[str, Any] = {
    "phase": "Running",
    "podIP": "127.0.0.1",
    "podIPs": [{"ip": "127.0.0.1"}],
    "conditions": [{"type": "Ready", "status": "True"}],
}


class Brokers:
    """Real sidecars standing in for a TierlogCluster's pods, with the test as the kubelet.

    There is no controller-manager or kubelet in the test control plane: the StatefulSet
    the operator applies grows no Pods. This plays their part: for broker ``n`` it starts a
    real ``tierlog-sidecar`` with the cluster's ``server.properties`` from the ConfigMap
    (paths and listeners made local), creates the Pod object from the StatefulSet's
    template (its IP 127.0.0.1, its grpc port a ``PodPort`` in front of the sidecar) and
    writes the Pod's status (Ready) itself. ``project()`` copies the ConfigMap's
    assignment.json to the file the sidecars read, as the kubelet projects a ConfigMap
    volume; there, and in the plans the operator pushes through the ``PodPort``, each
    started broker's address (``NAME-N.NAME-brokers.NS.svc:9092``) becomes its loopback
    address, as the cluster's DNS would resolve it, so clients can follow the plan to
    the owners. A broker serving TLS has its Pod name the sidecar itself (the ``PodPort``
    speaks plain gRPC): plans pushed to it keep the DNS names, which no test of TLS
    follows. Secret volumes of the template (the brokers' TLS and token) are projected
    as the kubelet does, into files under ``workdir``, and the settings naming files
    under their mount paths name those files instead. ``settings`` are
    broker settings a test adds to the ConfigMap's (e.g. a faster uploader), as a test's
    own image could.
    """

    def __init__(
        self, plane: ControlPlane, namespace: str, cluster: str, workdir: Path, *settings: str
    ):
        self.plane, self.namespace, self.cluster, self.workdir = plane, namespace, cluster, workdir
        self.settings = settings
        self.assignment_file = workdir / "assignment.json"
        self.sidecars: dict[int, SidecarProcess] = {}
        self.ports: dict[int, int] = {}  # broker id -> its sidecar's port, kept on restarts
        self.pod_ports: dict[int, PodPort] = {}  # broker id -> the port its Pod names
        self.env: dict[str, str] | None = None  # the sidecars' (None: the test's)
        self.node_names: dict[int, str] = {}  # broker id -> the Node its Pod is on
        self.started = Sidecars()

    def with_service_account(self, account: str) -> None:
        """Start the sidecars with a token of ``account`` (so with its RBAC alone) as the
        API server's credentials, as the kubelet mounts a pod's service account token."""
        path = self.plane.kubeconfig_as(account, self.namespace, self.workdir)
        self.env = {**os.environ, "KUBECONFIG": str(path)}

    def config_map(self) -> dict[str, str]:
        data: dict[str, str] = self.plane.get_json(
            "configmap", f"{self.cluster}-config", "-n", self.namespace
        )["data"]
        return data

    def stateful_set(self) -> dict[str, Any]:
        found: dict[str, Any] = self.plane.get_json(
            "statefulset", self.cluster, "-n", self.namespace
        )
        return found

    def resolve(self, document: str) -> str:
        """A plan (``assignment.json``) with each started broker's name resolved."""
        plan = json.loads(document)
        for node, port in self.ports.items():
            if str(node) in plan["brokers"]:
                plan["brokers"][str(node)] = f"127.0.0.1:{port}"
        return json.dumps(plan)

    def project(self) -> None:
        partial = self.assignment_file.with_suffix(".partial")
        partial.write_text(self.resolve(self.config_map()["assignment.json"]))
        partial.replace(self.assignment_file)

    def _project_secrets(self, node: int) -> dict[str, Path]:
        """Each Secret volume's files under this broker's directory: mount path -> it."""
        spec = self.stateful_set()["spec"]["template"]["spec"]
        mounts = {
            mount["name"]: mount["mountPath"] for mount in spec["containers"][0]["volumeMounts"]
        }
        projected = {}
        for volume in spec["volumes"]:
            secret = volume.get("secret")
            if not secret:
                continue
            data = self.plane.get_json("secret", secret["secretName"], "-n", self.namespace)["data"]
            directory = self.workdir / f"broker-{node}-{volume['name']}"
            directory.mkdir(exist_ok=True)
            for item in secret["items"]:
                (directory / item["path"]).write_bytes(base64.b64decode(data[item["key"]]))
            projected[mounts[volume["name"]]] = directory
        return projected

    def _configs(self, node: int) -> tuple[str, ...]:
        local = {
            "log.dirs",
            "listeners",
            "tierlog.metrics.listeners",
            "tierlog.cluster.assignment.file",
        }
        props = [
            line.partition("=")
            for line in self.config_map()["server.properties"].splitlines()
            if line and not line.startswith("#")
        ]
        projected = self._project_secrets(node)
        for index, (key, sep, value) in enumerate(props):
            mount, _, name = value.rpartition("/")
            if mount in projected:
                props[index] = (key, sep, str(projected[mount] / name))
        return (
            *(f"{key}={value}" for key, _, value in props if key not in local),
            f"node.id={node}",
            f"tierlog.cluster.assignment.file={self.assignment_file}",
            *self.settings,
        )

    def start(self, node: int) -> SidecarProcess:
        """Start (or restart) broker ``node``'s sidecar and publish its ready Pod."""
        port = self.ports.setdefault(node, free_port())
        self.project()
        sidecar = SidecarProcess(
            self.workdir / f"broker-{node}", self._configs(node), port, env=self.env
        )
        self.sidecars[node] = self.started.add(sidecar.start())
        if "ssl.keystore.location" in self.config_map()["server.properties"]:
            self.create_pod(node, port)
        else:
            if node not in self.pod_ports:
                self.pod_ports[node] = PodPort(f"127.0.0.1:{port}", self.resolve)
            self.create_pod(node, self.pod_ports[node].port)
        self.write_pod_status(node, READY_POD_STATUS)
        return sidecar

    def create_pod(self, node: int, port: int) -> None:
        """Broker ``node``'s Pod object, as the StatefulSet controller creates it."""
        template = self.stateful_set()["spec"]["template"]
        name = f"{self.cluster}-{node}"
        spec = template["spec"]
        container = spec["containers"][0]
        container["ports"] = [
            {**each, "containerPort": port} if each["name"] == "grpc" else each
            for each in container["ports"]
        ]
        spec["volumes"] = [*spec["volumes"], {"name": "data", "emptyDir": {}}]
        if node in self.node_names:  # as the scheduler binds it
            spec["nodeName"] = self.node_names[node]
        labels = template["metadata"]["labels"]  # as on Kubernetes 1.27: no pod-index label
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": labels,
                "annotations": template["metadata"].get("annotations", {}),
            },
            "spec": spec,
        }
        self.plane.kubectl("apply", "-f", "-", input=json.dumps(pod))

    def write_pod_status(self, node: int, status: dict[str, Any]) -> None:
        """Broker ``node``'s Pod status, written as its kubelet writes it."""
        self.plane.kubectl(
            "patch", "pod", f"{self.cluster}-{node}", "-n", self.namespace,
            "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip

    def pod_exists(self, node: int) -> bool:
        done = self.plane.kubectl(
            "get", "pod", f"{self.cluster}-{node}", "-n", self.namespace, check=False
        )
        return done.returncode == 0

    def stop(self, node: int) -> None:
        self.sidecars[node].stop()

    def kill_all(self) -> None:
        self.started.kill_all()
        for pod_port in self.pod_ports.values():
            pod_port.close()


@pytest.fixture
def brokers_for(kube: ControlPlane, tmp_path: Path) -> Iterator[Callable[..., Brokers]]:
    """``brokers_for(namespace, cluster, *settings)``: a cluster's ``Brokers``."""
    made: list[Brokers] = []

    def make(namespace: str, cluster: str, *settings: str) -> Brokers:
        brokers = Brokers(kube, namespace, cluster, tmp_path / f"brokers-{cluster}", *settings)
        brokers.workdir.mkdir(parents=True)
        made.append(brokers)
        return brokers

    yield make
    for brokers in made:
        brokers.kill_all()
