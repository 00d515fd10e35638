"""The operator reaches brokers that ask for TLS, a client certificate and a token: the
operator as a process against the real API server, real sidecars started from the
rendered config with the Secrets projected as the kubelet would (``Brokers``).

The brokers' certificate names only ``*.demo-brokers.NS.svc``, not the loopback address
the operator dials, so the operator checks it against the pod's DNS name.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, replace
from typing import Any

import pytest

from tests.operator.conftest import Brokers, RunningOperator, wait_for
from tests.operator.test_handlers import (
    apply,
    cluster,
    condition,
    events,
    get,
    ready_cluster,
    topic,
    wait_ready,
)
from tests.support.certs import Authority, Issued
from tests.support.kube import ControlPlane
from tierlog.api.errors import SaslAuthenticationFailedError
from tierlog.client import AdminClient, ChannelSecurity, Cluster, NetworkError

pytestmark = pytest.mark.slow

TOKEN = "s3cret-t0ken"


@dataclass(frozen=True)
class Credentials:
    """An application's: the CA, a client certificate, the token."""

    namespace: str
    ca: bytes
    certificate: Issued
    token: str

    def security(self, broker: str, *, token: bool = True) -> ChannelSecurity:
        """For ``broker`` (``demo-N``), dialled on loopback, its certificate checked against
        its DNS name as the operator does."""
        return ChannelSecurity(
            True,
            self.ca,
            self.certificate.certificate_pem,
            self.certificate.key_pem,
            self.token if token else None,
            server_name=f"{broker}.demo-brokers.{self.namespace}.svc",
        )


@contextmanager
def _admin(address: str, security: ChannelSecurity) -> Iterator[AdminClient]:
    with closing(Cluster([address], request_timeout_ms=5000, security=security)) as cluster:
        yield AdminClient(address, cluster=cluster)


def _secret(name: str, files: dict[str, bytes], kind: str = "Opaque") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": kind,
        "data": {key: base64.b64encode(value).decode() for key, value in files.items()},
    }


def _secrets(kube: ControlPlane, ns: str) -> Credentials:
    """demo-tls (the brokers'), operator-tls and demo-token in ``ns``; an app's own."""
    authority = Authority("demo CA")
    server = authority.issue(
        "demo-brokers", server=True, hosts=[f"*.demo-brokers.{ns}.svc"], loopback=False
    )
    brokers = {
        "tls.crt": server.certificate_pem,
        "tls.key": server.key_pem,
        "ca.crt": authority.certificate_pem,
    }
    apply(kube, ns, _secret("demo-tls", brokers, "kubernetes.io/tls"))
    operator = authority.issue("tierlog-operator", server=False)
    client = {"tls.crt": operator.certificate_pem, "tls.key": operator.key_pem}
    apply(kube, ns, _secret("operator-tls", client, "kubernetes.io/tls"))
    apply(kube, ns, _secret("demo-token", {"token": f"{TOKEN}\n".encode()}))
    app = authority.issue("app", server=False)
    return Credentials(ns, authority.certificate_pem, app, TOKEN)


SECURED = {
    "tls": {
        "secretName": "demo-tls",
        "clientAuth": "required",
        "operatorClientSecret": "operator-tls",
    },
    "authentication": {"tokenSecret": {"name": "demo-token"}},
}


def _topic_ready(kube: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    body = get(kube, ns, "tierlogtopic", name)
    return body if condition(body, "Ready")["status"] == "True" else None


def test_topics_and_a_roll_over_mutual_tls_with_the_token(
    kube: ControlPlane,
    operator: RunningOperator,
    brokers_for: Callable[[str, str], Brokers],
) -> None:
    ns = operator.namespace
    credentials = _secrets(kube, ns)
    brokers = brokers_for(ns, "demo")
    ready_cluster(kube, ns, brokers, "demo", 2, **SECURED)
    assert "ssl.client.auth=required" in brokers.config_map()["server.properties"]

    apply(kube, ns, topic("orders", "demo", 3))
    wait_for("the topic Ready (created on each broker)", lambda: _topic_ready(kube, ns, "orders"))
    for node, sidecar in brokers.sidecars.items():
        broker = f"demo-{node}"
        with _admin(sidecar.address, credentials.security(broker)) as admin:
            assert admin.list_topics() == {"orders": 3}
        no_token = credentials.security(broker, token=False)
        with (
            _admin(sidecar.address, no_token) as admin,
            pytest.raises(SaslAuthenticationFailedError),
        ):
            admin.list_topics()
        no_certificate = replace(
            credentials.security(broker), certificate_chain=None, private_key=None
        )
        with _admin(sidecar.address, no_certificate) as admin, pytest.raises(NetworkError):
            admin.list_topics()

    # A restart is asked of the broker over the same channel: safe, so it goes.
    apply(
        kube, ns, cluster("demo", brokers=2, logDefaults={"log.retention.ms": 3600000}, **SECURED)
    )
    wait_for("broker 1's pod deleted", lambda: not brokers.pod_exists(1))
    brokers.stop(1)
    brokers.start(1)
    wait_for("broker 0's pod deleted", lambda: not brokers.pod_exists(0))
    brokers.stop(0)
    brokers.start(0)
    wait_ready(kube, ns, "demo", "Ready after the roll")
    restarts = [message for reason, message in events(kube, ns) if reason == "RestartingBroker"]
    assert len(restarts) == 2 and all("flushed and safe" in message for message in restarts)


def test_turning_tls_on_rolls_through_brokers_that_still_speak_plaintext(
    kube: ControlPlane,
    operator: RunningOperator,
    brokers_for: Callable[[str, str], Brokers],
) -> None:
    """The pod not restarted yet is asked, in plaintext, whether it is safe to restart;
    the restarted one is reached over TLS with the token."""
    ns = operator.namespace
    credentials = _secrets(kube, ns)
    brokers = brokers_for(ns, "demo")
    ready_cluster(kube, ns, brokers, "demo", 1)

    apply(kube, ns, cluster("demo", brokers=1, **SECURED))
    wait_for("the plaintext broker's pod deleted", lambda: not brokers.pod_exists(0))
    brokers.stop(0)
    brokers.start(0)
    wait_ready(kube, ns, "demo", "Ready over TLS")
    apply(kube, ns, topic("orders", "demo", 2))
    wait_for("the topic Ready over TLS", lambda: _topic_ready(kube, ns, "orders"))
    with _admin(brokers.sidecars[0].address, credentials.security("demo-0")) as admin:
        assert admin.list_topics() == {"orders": 2}


def test_a_missing_secret_key_defers_the_restart_and_says_so(
    kube: ControlPlane,
    operator: RunningOperator,
    brokers_for: Callable[[str, str], Brokers],
) -> None:
    ns = operator.namespace
    _secrets(kube, ns)
    brokers = brokers_for(ns, "demo")
    ready_cluster(kube, ns, brokers, "demo", 1, **SECURED)
    apply(kube, ns, _secret("demo-token", {"other": b"x"}))  # the token's key is gone

    apply(
        kube, ns, cluster("demo", brokers=1, logDefaults={"log.retention.ms": 3600000}, **SECURED)
    )
    deferred = wait_for(
        "the restart deferred",
        lambda: [m for r, m in events(kube, ns) if r == "RestartDeferred"],
    )
    assert "MissingSecretKeyError: the Secret demo-token has no token" in deferred[0]
    assert brokers.pod_exists(0)
