"""Where the docs tell a client to find a broker, the operator renders one.

A broker of cluster ``C`` in namespace ``NS`` is ``C-N.C-brokers.NS.svc:9092`` (the
headless Service's per-pod record; ``C-N.C-brokers:9092`` from its own namespace), and
``C.NS.svc:9092`` is the client Service. Any other in-cluster name with the gRPC port in
the docs, the README or the chart's notes is one a user would copy and never reach.
"""

from __future__ import annotations

import re
from pathlib import Path

from tierlog.operator.render.common import GRPC_PORT, Owner, broker_host
from tierlog.operator.render.services import client_service
from tierlog.operator.spec import ClusterSpec

REPO = Path(__file__).resolve().parents[3]
DOCUMENTS = [
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "README.md",
    REPO / "charts" / "tierlog" / "templates" / "NOTES.txt",
    *sorted((REPO / "deploy" / "examples").glob("*.yaml")),
]
# A DNS name with at least one dot (not an IP, not a placeholder in capitals) and the port.
ADDRESS = re.compile(rf"(?<![\w.$-])([a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+):{GRPC_PORT}\b")


def _rendered(host: str) -> bool:
    """Whether ``host`` is a name the operator renders, with or without ``.NS.svc``."""
    labels = host.split(".")
    broker = re.fullmatch(r"(.+)-(\d+)", labels[0])
    if broker is not None:
        name, node = broker.group(1), int(broker.group(2))
        namespace = labels[2] if len(labels) > 2 else "ns"
        full = broker_host(ClusterSpec(name=name, namespace=namespace), node)
        return full == host or full.startswith(host + ".")
    if len(labels) == 3 and labels[2] == "svc":
        cluster = ClusterSpec(name=labels[0], namespace=labels[1])
        service = client_service(cluster, Owner(cluster.name, ""))["metadata"]
        return f"{service['name']}.{service['namespace']}.svc" == host
    return False


def test_every_documented_broker_address_is_one_the_operator_renders() -> None:
    found = [
        (path.relative_to(REPO), host)
        for path in DOCUMENTS
        for host in ADDRESS.findall(path.read_text())
    ]
    assert found, "the docs name brokers somewhere (docs/API.md)"
    assert [(str(path), host) for path, host in found if not _rendered(host)] == []
