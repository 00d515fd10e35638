"""The client over TLS, mutual TLS and a bearer token: real handshakes with a real sidecar."""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tests.support.certs import Authority
from tierlog.api.errors import SaslAuthenticationFailedError, ThrottlingQuotaExceededError
from tierlog.client import (
    AdminClient,
    Cluster,
    Consumer,
    NetworkError,
    Producer,
    TopicPartition,
)
from tierlog.client.config import ConsumerConfig, ProducerConfig
from tierlog.client.errors import ConfigError, error_for_reason, is_retriable
from tierlog.client.security import TOKEN_ENV, ChannelSecurity

from .conftest import SidecarStarter


@dataclass(frozen=True)
class Pki:
    """A CA, the broker's certificate and key, and an application's client certificate."""

    ca: Path
    server_certificate: Path
    server_key: Path
    client_certificate: Path
    client_key: Path
    stranger_ca: Path  # a CA that signed nothing here


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    authority, stranger = Authority("tierlog test CA"), Authority("someone else")
    ca, stranger_ca = tmp_path / "ca.crt", tmp_path / "stranger.crt"
    ca.write_bytes(authority.certificate_pem)
    stranger_ca.write_bytes(stranger.certificate_pem)
    server = authority.issue("broker-0", server=True).write(tmp_path, "server")
    client = authority.issue("app-pod", server=False).write(tmp_path, "client")
    return Pki(ca, *server, *client, stranger_ca)


def _tls(pki: Pki, **extra: str) -> dict[str, object]:
    return {"security.protocol": "SSL", "ssl.truststore.location": str(pki.ca), **extra}


def _mutual_tls(pki: Pki) -> dict[str, object]:
    return _tls(
        pki,
        **{
            "ssl.keystore.location": str(pki.client_certificate),
            "tierlog.ssl.keystore.key.location": str(pki.client_key),
        },
    )


def _round_trip(address: str, props: dict[str, object], topic: str) -> list[bytes | None]:
    """Create ``topic``, produce three records and consume them back, all with ``props``."""
    common = {"bootstrap.servers": address, **props}
    with AdminClient({**common, "request.timeout.ms": 5000}) as admin:
        admin.create_topic(topic)
    with Producer({**common, "linger.ms": 0}) as producer:
        for value in (b"a", b"b", b"c"):
            producer.send(topic, value).result(timeout=30)
    with Consumer({**common, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes | None] = []
        while len(values) < 3:
            values += [record.value for record in consumer.poll(5000)]
    return values


def test_tls_with_the_servers_ca_and_only_with_it(
    sidecars: SidecarStarter, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    sidecar = sidecars(
        "data",
        f"ssl.keystore.location={pki.server_certificate}",
        f"tierlog.ssl.keystore.key.location={pki.server_key}",
    )
    assert _round_trip(sidecar.address, _tls(pki), "secure") == [b"a", b"b", b"c"]

    untrusting = _tls(pki, **{"ssl.truststore.location": str(pki.stranger_ca)})
    for props in (untrusting, {}):  # a CA that did not sign it; no TLS at all
        config = {"bootstrap.servers": sidecar.address, "request.timeout.ms": 3000, **props}
        with AdminClient(config) as admin, pytest.raises(NetworkError):
            admin.list_topics()
    sidecar.assert_alive()


def test_mutual_tls_and_a_bearer_token_from_a_file_or_the_environment(
    sidecars: SidecarStarter, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-t0ken\n")
    sidecar = sidecars(
        "data",
        f"ssl.keystore.location={pki.server_certificate}",
        f"tierlog.ssl.keystore.key.location={pki.server_key}",
        f"ssl.truststore.location={pki.ca}",
        "ssl.client.auth=required",
        f"tierlog.auth.token.file={token_file}",
    )
    mutual = _mutual_tls(pki)
    with_token = {**mutual, "tierlog.auth.token.file": str(token_file)}
    assert _round_trip(sidecar.address, with_token, "by-file") == [b"a", b"b", b"c"]

    base = {"bootstrap.servers": sidecar.address, "request.timeout.ms": 3000}
    with AdminClient({**base, **mutual}) as admin, pytest.raises(SaslAuthenticationFailedError):
        admin.list_topics()  # the handshake passes, the call has no token
    with Producer({**base, **mutual}) as producer, pytest.raises(SaslAuthenticationFailedError):
        producer.send("by-file", b"x")  # its Metadata call is refused
    with AdminClient({**base, **_tls(pki)}) as admin, pytest.raises(NetworkError):
        admin.list_topics()  # no client certificate: no handshake

    monkeypatch.setenv(TOKEN_ENV, "s3cret-t0ken")
    assert _round_trip(sidecar.address, mutual, "by-env") == [b"a", b"b", b"c"]
    monkeypatch.setenv(TOKEN_ENV, "a-guess")
    with AdminClient({**base, **mutual}) as admin, pytest.raises(SaslAuthenticationFailedError):
        admin.list_topics()
    sidecar.assert_alive()


def test_a_client_certificate_and_key_may_share_one_pem_file(
    sidecars: SidecarStarter, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    sidecar = sidecars(
        "data",
        f"ssl.keystore.location={pki.server_certificate}",
        f"tierlog.ssl.keystore.key.location={pki.server_key}",
        f"ssl.truststore.location={pki.ca}",
        "ssl.client.auth=required",
    )
    keystore = tmp_path / "keystore.pem"  # Kafka's PEM keystore: the key and the chain
    keystore.write_bytes(pki.client_key.read_bytes() + pki.client_certificate.read_bytes())
    props = _tls(pki, **{"ssl.keystore.location": str(keystore)})
    with AdminClient({"bootstrap.servers": sidecar.address, **props}) as admin:
        assert admin.list_topics() == {}


def test_a_server_name_checks_the_certificate_of_a_broker_dialled_by_its_ip(
    sidecars: SidecarStarter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the operator dials a pod's IP, whose certificate names its DNS name only."""
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    authority = Authority("tierlog test CA")
    server = authority.issue("demo-0", server=True, hosts=["*.demo-brokers.ns.svc"], loopback=False)
    certificate, key = server.write(tmp_path, "tls")
    sidecar = sidecars(
        "data", f"ssl.keystore.location={certificate}", f"tierlog.ssl.keystore.key.location={key}"
    )
    trusting = ChannelSecurity(True, authority.certificate_pem)
    named = replace(trusting, server_name="demo-0.demo-brokers.ns.svc")
    with closing(Cluster([sidecar.address], security=named)) as cluster:
        assert AdminClient(sidecar.address, cluster=cluster).list_topics() == {}
    wrong_name = replace(trusting, server_name="demo-0.other.ns.svc")
    for security in (trusting, wrong_name):  # 127.0.0.1; a name the certificate lacks
        cluster = Cluster([sidecar.address], request_timeout_ms=3000, security=security)
        with closing(cluster), pytest.raises(NetworkError):
            AdminClient(sidecar.address, cluster=cluster).list_topics()


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        ({"ssl.truststore.location": "{ca}"}, "security.protocol is PLAINTEXT"),
        ({"security.protocol": "TLS"}, "not one of PLAINTEXT, SSL"),
        ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent"}, "cannot read"),
        ({"security.protocol": "SSL", "ssl.truststore.location": "{key}"}, "no PEM certificate"),
        ({"security.protocol": "SSL", "ssl.keystore.location": "{ca}"}, "and a private key"),
        ({"security.protocol": "SSL", "tierlog.ssl.keystore.key.location": "{key}"}, "needs"),
        ({"tierlog.auth.token.file": "{empty}"}, "is empty"),
    ],
)
def test_bad_security_settings_are_config_errors(
    pki: Pki, tmp_path: Path, settings: dict[str, str], complaint: str
) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    files = {"ca": pki.ca, "key": pki.client_key, "empty": empty}
    props = {key: value.format(**files) for key, value in settings.items()}
    for config_type in (ProducerConfig, ConsumerConfig):
        with pytest.raises(ConfigError, match=complaint):
            ChannelSecurity.from_config(config_type.from_properties(props))


def test_the_token_and_key_never_show_in_a_repr(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-t0ken")
    security = ChannelSecurity.from_properties({"tierlog.auth.token.file": str(token_file)})
    assert security.token == "s3cret-t0ken"
    assert "s3cret" not in repr(security)


def test_the_sidecars_refusal_reasons_are_typed_and_throttling_is_retriable() -> None:
    refused = error_for_reason("SASL_AUTHENTICATION_FAILED", "no bearer token")
    throttled = error_for_reason("THROTTLING_QUOTA_EXCEEDED", "queued.max.requests")
    assert isinstance(refused, SaslAuthenticationFailedError) and not is_retriable(refused)
    assert isinstance(throttled, ThrottlingQuotaExceededError) and is_retriable(throttled)
