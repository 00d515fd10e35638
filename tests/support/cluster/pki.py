"""The node's certificates, tokens and kubeconfigs, written once per ``up`` from scratch.

One throwaway CA signs the API server's serving certificate (named by the bridge address,
the ``kubernetes`` Service's ClusterIP and its DNS names, so pods' in-cluster clients
verify it) and the client certificate the API server shows the kubelet. Every component
reaches the API server with a bearer token from ``--token-auth-file``: the user names are
the ones Kubernetes' built-in RBAC roles and the Node authorizer expect, so no binding
has to be written for them. Certificates last a day (``tests/support/certs.py``).
"""

from __future__ import annotations

import ipaddress
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from tests.support.certs import Authority
from tests.support.cluster.layout import (
    API_PORT,
    CLUSTER_DOMAIN,
    GATEWAY,
    NODE_NAME,
    SERVICE_RANGE,
    Layout,
)
from tests.support.kube import ADMIN_USER, kubeconfig, write_key_pair

__all__ = ["USERS", "Pki", "api_server_url", "write_pki"]

# Component -> (user, groups). system:masters is the admin's; the others are the users
# the bootstrap ClusterRoleBindings name; CoreDNS's role is applied by ``node.py``.
USERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": (ADMIN_USER, ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    "kube-proxy": ("system:kube-proxy", ()),
    "kubelet": (f"system:node:{NODE_NAME}", ("system:nodes",)),
    "coredns": ("tierlog:coredns", ()),
}


def api_server_url() -> str:
    return f"https://{GATEWAY}:{API_PORT}"


@dataclass(frozen=True)
class Pki:
    ca_file: Path
    serving_cert: Path
    serving_key: Path
    kubelet_client_cert: Path
    kubelet_client_key: Path
    service_account_key: Path  # private: signs the tokens
    service_account_pub: Path
    tokens: Path


def _kubernetes_service_ip() -> str:
    return str(next(ipaddress.ip_network(SERVICE_RANGE).hosts()))


def write_pki(layout: Layout) -> Pki:
    """Write every file into ``layout.pki`` and a kubeconfig per component."""
    pki = layout.pki
    pki.mkdir(parents=True, exist_ok=True)
    authority = Authority("tierlog-cluster-ca")
    ca_file = pki / "ca.crt"
    ca_file.write_bytes(authority.certificate_pem)
    names = [f"kubernetes.default.svc.{CLUSTER_DOMAIN}", "kubernetes.default.svc"]
    hosts = [GATEWAY, _kubernetes_service_ip(), *names, "kubernetes.default", "kubernetes"]
    serving_cert, serving_key = authority.issue("kube-apiserver", server=True, hosts=hosts).write(
        pki, "apiserver"
    )
    client_cert, client_key = authority.issue("kube-apiserver-kubelet-client", server=False).write(
        pki, "apiserver-kubelet-client"
    )
    sa_key, sa_pub = write_key_pair(pki)
    lines, server = [], api_server_url()
    for component, (user, groups) in USERS.items():
        token = secrets.token_urlsafe(24)
        lines.append(f'{token},{user},{user},"{",".join(groups)}"')
        config = kubeconfig(server, ca_file, token, user)
        layout.kubeconfig(component).write_text(json.dumps(config, indent=2))
    tokens = pki / "tokens.csv"
    tokens.write_text("\n".join(lines) + "\n")
    layout.admin_kubeconfig.write_bytes(layout.kubeconfig("admin").read_bytes())
    return Pki(ca_file, serving_cert, serving_key, client_cert, client_key, sa_key, sa_pub, tokens)
