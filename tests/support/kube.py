"""A real Kubernetes API server on loopback (etcd + kube-apiserver), envtest style.

``start_control_plane(workdir)`` starts etcd and kube-apiserver (built from source by
``make tools``, see ``tests/tools/control_plane.py``) on free 127.0.0.1 ports, with a
throwaway CA and serving certificate, a service-account signing key and a bearer token
for an admin user in ``system:masters``; it returns once ``/readyz`` answers and writes a
kubeconfig beside the rest. There is no controller-manager, scheduler or kubelet: objects
are stored and validated (schemas, admission, RBAC) but nothing runs them, so no
StatefulSet grows Pods and no garbage collector follows owner references. Tests that need
Pods create them and write their status themselves.

``control_plane`` is the session-wide fixture (registered for every test folder by
``tests/conftest.py``); tests keep apart by working in a namespace of their own
(``ControlPlane.create_namespace``).
"""

from __future__ import annotations

import json
import secrets
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.certs import Authority
from tests.support.sidecars import free_port
from tests.tools.control_plane import etcd_bin, kube_apiserver_bin, kubectl_bin

__all__ = [
    "ADMIN_USER",
    "AUDIT_LOG",
    "ControlPlane",
    "control_plane",
    "kubeconfig",
    "run_kubectl",
    "start_control_plane",
    "write_key_pair",
]

ADMIN_USER = "tierlog-test-admin"
_READY_TIMEOUT_S = 180.0  # a cold start on a busy 2-core machine is slow


@dataclass
class _Process:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout_s: float = 30) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _spawn(name: str, command: Sequence[str | Path], workdir: Path) -> _Process:
    log_path = workdir / f"{name}.log"
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            [str(part) for part in command], stdout=log_file, stderr=subprocess.STDOUT
        )
    return _Process(name, process, log_path)


@dataclass
class ControlPlane:
    """A running etcd and kube-apiserver, and how to reach them as an admin."""

    workdir: Path
    server: str  # https://127.0.0.1:PORT
    token: str = field(repr=False)
    ca_file: Path
    kubeconfig: Path
    processes: list[_Process]
    etcd_url: str = ""

    def compact_etcd(self) -> None:
        """Drop every revision before etcd's current one, as the API server's periodic
        compaction does: a watch the server serves from etcd (no watch cache) from an
        older ``resourceVersion`` then ends with 410 Gone."""
        revision = self._etcd("range", {"key": "AA=="})["header"]["revision"]
        self._etcd("compaction", {"revision": revision, "physical": True})

    def _etcd(self, call: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            f"{self.etcd_url}/v3/kv/{call}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this server; with ``check``, a failure shows its output."""
        done = run_kubectl(self.kubeconfig, *args, input=input)
        if check and done.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
            )
        return done

    def get_json(self, *args: str) -> Any:
        """``kubectl get ARGS -o json``, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def kubeconfig_as(self, account: str, namespace: str, workdir: Path) -> Path:
        """A kubeconfig holding a token of ServiceAccount ``account`` (so its RBAC alone),
        as the kubelet mounts a pod's; written into ``workdir``."""
        token = self.kubectl("create", "token", account, "-n", namespace).stdout.strip()
        config = json.loads(self.kubeconfig.read_text())
        config["users"][0]["user"] = {"token": token}
        path = workdir / f"kubeconfig-{namespace}-{account}"
        path.write_text(json.dumps(config))
        return path

    def create_namespace(self, prefix: str = "test") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.kubectl("create", "namespace", name)
        return name

    def request(self, path: str) -> tuple[int, str]:
        """A GET to the API server as the admin: the status and body."""
        request = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}:\n{p.output[-6000:]}" for p in self.processes)

    def stop(self) -> None:
        for process in reversed(self.processes):  # the API server before its etcd
            process.stop()


def write_key_pair(workdir: Path) -> tuple[Path, Path]:
    """The service-account token signing key (private) and its public half."""
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = workdir / "sa.key", workdir / "sa.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def kubeconfig(server: str, ca_file: Path, token: str, user: str = ADMIN_USER) -> dict[str, Any]:
    """A kubeconfig (as data) that reaches ``server`` as ``user`` with a bearer token."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "tierlog-test",
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": "tierlog-test", "context": {"cluster": "tierlog-test", "user": user}}
        ],
        "current-context": "tierlog-test",
    }


def _start_etcd(workdir: Path) -> tuple[_Process, str]:
    client_port, peer_port = free_port(), free_port()
    client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    etcd = _spawn(
        "etcd",
        [
            etcd_bin(),
            "--name=test",
            f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=test={peer_url}",
            "--unsafe-no-fsync",  # a throwaway store: durability is not under test here
            "--log-level=warn",
        ],
        workdir,
    )
    return etcd, client_url


def _apiserver_command(workdir: Path, etcd_url: str, port: int, token: str) -> list[str | Path]:
    authority = Authority("tierlog-test-kube-ca")
    ca_file = workdir / "ca.crt"
    ca_file.write_bytes(authority.certificate_pem)
    serving_cert, serving_key = authority.issue("kube-apiserver", server=True).write(
        workdir, "apiserver"
    )
    signing_key, public_key = write_key_pair(workdir)
    tokens = workdir / "tokens.csv"
    tokens.write_text(f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
    return [
        kube_apiserver_bin(),
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={serving_cert}",
        f"--tls-private-key-file={serving_key}",
        f"--client-ca-file={ca_file}",
        f"--token-auth-file={tokens}",
        "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={public_key}",
        f"--service-account-signing-key-file={signing_key}",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--allow-privileged=true",
        # No controller-manager makes each namespace's "default" ServiceAccount, so the
        # admission plugin that requires it would refuse every Pod the tests create.
        "--disable-admission-plugins=ServiceAccount",
    ]


AUDIT_LOG = "audit.log"  # in the control plane's workdir, when it has an audit policy


def start_control_plane(
    workdir: Path, audit_policy: str | None = None, watch_cache: bool = True
) -> ControlPlane:
    """Start etcd and kube-apiserver in ``workdir``; return once the API server is ready.
    With ``audit_policy`` (a Policy document), the server writes the audit events it
    asks for to ``workdir / AUDIT_LOG``, as JSON lines. Without ``watch_cache``, the
    server serves every watch from etcd, so ``compact_etcd`` expires old versions."""
    workdir.mkdir(parents=True, exist_ok=True)
    etcd, etcd_url = _start_etcd(workdir)
    port, token = free_port(), secrets.token_urlsafe(24)
    command = _apiserver_command(workdir, etcd_url, port, token)
    if audit_policy is not None:
        policy = workdir / "audit-policy.yaml"
        policy.write_text(audit_policy)
        command += [f"--audit-policy-file={policy}", f"--audit-log-path={workdir / AUDIT_LOG}"]
    if not watch_cache:
        command.append("--watch-cache=false")
    apiserver = _spawn("kube-apiserver", command, workdir)
    ca_file = workdir / "ca.crt"
    server = f"https://127.0.0.1:{port}"
    config_file = workdir / "kubeconfig"
    config_file.write_text(json.dumps(kubeconfig(server, ca_file, token), indent=2))
    plane = ControlPlane(workdir, server, token, ca_file, config_file, [etcd, apiserver], etcd_url)
    try:
        _wait_ready(plane)
    except BaseException:
        plane.stop()
        raise
    return plane


def _wait_ready(plane: ControlPlane) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        for process in plane.processes:
            if process.process.poll() is not None:
                raise AssertionError(f"{process.name} exited early:\n{plane.logs()}")
        try:
            status, body = plane.request("/readyz")
        except (OSError, ssl.SSLError) as error:  # not listening yet
            status, body = 0, str(error)
        if status == 200:
            return
        last = body
        time.sleep(0.5)
    raise AssertionError(
        f"kube-apiserver not ready in {_READY_TIMEOUT_S:.0f} s: {last}\n{plane.logs()}"
    )


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One etcd + kube-apiserver for the whole test session, stopped at its end."""
    plane = start_control_plane(tmp_path_factory.mktemp("kube"))
    try:
        yield plane
    finally:
        plane.stop()


def run_kubectl(
    kubeconfig: Path, *args: str, input: str | None = None, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """kubectl against the server ``kubeconfig`` names, its output captured, never raising
    on a non-zero exit: the caller decides what a failure means. ``timeout_s`` bounds the
    process (a ``kubectl wait`` needs more than its own ``--timeout``)."""
    return subprocess.run(
        [str(kubectl_bin()), f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout_s,
    )
