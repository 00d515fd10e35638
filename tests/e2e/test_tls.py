"""A cluster with TLS and a token, on the real node: ``deploy/examples/cluster-tls.yaml``
with its two Secrets becomes Ready (the kubelet's probes and the operator's calls to
every broker work over TLS with the token), a topic is created on each broker through
them, and a Job with the CA and the token mounted produces and reads back every record
while a Job without the token is refused."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import Node
from tests.e2e.workloads import (
    RECORDS,
    Brokers,
    SecretMount,
    count_records,
    finish_job,
    make_topic,
    produce_records,
    start_job,
)
from tests.support.certs import Authority

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLE: dict[str, Any] = yaml.safe_load(
    (REPO / "deploy" / "examples" / "cluster-tls.yaml").read_text()
)
TLS_SECRET = EXAMPLE["spec"]["tls"]["secretName"]
TOKEN = EXAMPLE["spec"]["authentication"]["tokenSecret"]  # name, key
CA_DIR, TOKEN_DIR = "/etc/tierlog-client/ca", "/etc/tierlog-client/token"


def _secret(name: str, data: dict[str, bytes], kind: str = "Opaque") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": kind,
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }


def _broker_names(cluster: str, namespace: str) -> list[str]:
    """What clients in the cluster dial: the per-broker names (full and short) and the
    client Service's."""
    brokers = f"{cluster}-brokers"
    return [
        f"*.{brokers}.{namespace}.svc",
        f"*.{brokers}.{namespace}",
        f"*.{brokers}",
        f"{cluster}.{namespace}.svc",
        cluster,
    ]


@pytest.fixture(scope="module")
def secured(one_node: Node, operator: str) -> Iterator[Brokers]:
    """The example's cluster with a fresh CA's certificate and a token, Ready."""
    namespace = one_node.create_namespace("tls")
    name = EXAMPLE["metadata"]["name"]
    authority = Authority("tierlog e2e CA")
    server = authority.issue(
        f"{name}-brokers", server=True, hosts=_broker_names(name, namespace), loopback=False
    )
    tls = {
        "tls.crt": server.certificate_pem,
        "tls.key": server.key_pem,
        "ca.crt": authority.certificate_pem,
    }
    try:
        for manifest in (
            _secret(TLS_SECRET, tls, "kubernetes.io/tls"),
            _secret(TOKEN["name"], {TOKEN["key"]: b"e2e-token-0123456789\n"}),
            EXAMPLE,
        ):
            one_node.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
        one_node.wait(namespace, "--for=condition=Ready", f"tierlogcluster/{name}")
        yield Brokers(namespace, name)
    finally:
        one_node.kubectl("delete", "namespace", namespace, "--timeout=180s")


def _client_job(node: Node, brokers: Brokers, name: str, script: str, *, token: bool) -> None:
    """A Job running ``script`` against the brokers' full names with the CA (and the
    token when ``token``) mounted from the cluster's Secrets, found by the CLI through
    $TIERLOG_TLS_CA and $TIERLOG_AUTH_TOKEN_FILE."""
    ca_only = {"secretName": TLS_SECRET, "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    env = {"TIERLOG_TLS_CA": f"{CA_DIR}/ca.crt"}
    secrets = [SecretMount("ca", ca_only, CA_DIR)]
    if token:
        env["TIERLOG_AUTH_TOKEN_FILE"] = f"{TOKEN_DIR}/{TOKEN['key']}"
        secrets.append(SecretMount("token", {"secretName": TOKEN["name"]}, TOKEN_DIR))
    start_job(
        node, brokers, name, script, servers=brokers.qualified_servers, env=env, secrets=secrets
    )


def test_a_job_with_the_ca_and_the_token_produces_and_reads_back_every_record(
    one_node: Node, secured: Brokers
) -> None:
    make_topic(one_node, secured, "secured")  # Ready: created on each broker over TLS
    script = f"{produce_records('secured')} && {count_records('secured')}"
    _client_job(one_node, secured, "tls-produce-consume", script, token=True)
    output = finish_job(one_node, secured, "tls-produce-consume")
    assert f"{RECORDS} records sent" in output, one_node.story(secured.namespace)
    assert output.strip().splitlines()[-1] == str(RECORDS), one_node.story(secured.namespace)


def test_a_job_without_the_token_is_refused(one_node: Node, secured: Brokers) -> None:
    make_topic(one_node, secured, "guarded")
    _client_job(one_node, secured, "tls-no-token", produce_records("guarded", 10), token=False)
    output = finish_job(one_node, secured, "tls-no-token", outcome="Failed")
    assert "SASL_AUTHENTICATION_FAILED" in output, one_node.story(secured.namespace)
