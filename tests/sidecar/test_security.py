"""TLS, mutual TLS and the bearer token, through real handshakes with a real sidecar."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.certs import Authority, Issued
from tests.support.scrape import METRICS, scrape_sidecar
from tierlog.api.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    log_service_pb2,
    log_service_pb2_grpc,
)
from tierlog.sidecar.config import SidecarConfig
from tierlog.sidecar.security import TOKEN_ENV
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.records import SimpleRecord, build_batch

from .conftest import SidecarFactory, reason_of

_Metadata = tuple[tuple[str, str], ...]


def _tls_channel(address: str, trusted: Authority, client: Issued | None = None) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=trusted.certificate_pem,
        private_key=client.key_pem if client else None,
        certificate_chain=client.certificate_pem if client else None,
    )
    return grpc.secure_channel(address, credentials)


def _list_topics(channel: grpc.Channel, metadata: _Metadata = ()) -> list[str]:
    admin = admin_service_pb2_grpc.AdminServiceStub(channel)
    answer = admin.ListTopics(admin_service_pb2.ListTopicsRequest(), timeout=10, metadata=metadata)
    return [topic.name for topic in answer.topics]


def _refused(channel: grpc.Channel) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as refused:
        _list_topics(channel)
    code: grpc.StatusCode = refused.value.code()
    return code


def test_tls_serves_clients_that_trust_its_certificate(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    authority, stranger = Authority("tierlog test CA"), Authority("someone else")
    certificate, key = authority.issue("broker-0", server=True).write(tmp_path, "tls")
    sidecar = sidecar_factory(
        tmp_path / "data",
        f"ssl.keystore.location={certificate}",
        f"tierlog.ssl.keystore.key.location={key}",  # a Kubernetes TLS Secret's two files
    )
    assert "(broker 0, TLS)" in sidecar.output
    with _tls_channel(sidecar.address, authority) as channel:
        assert _list_topics(channel) == []
    with grpc.insecure_channel(sidecar.address) as plaintext:
        assert _refused(plaintext) == grpc.StatusCode.UNAVAILABLE
    with _tls_channel(sidecar.address, stranger) as untrusting:
        assert _refused(untrusting) == grpc.StatusCode.UNAVAILABLE
    sidecar.assert_alive()


def test_mutual_tls_refuses_clients_without_a_certificate_from_the_truststore(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    authority, stranger = Authority("tierlog test CA"), Authority("someone else")
    server = authority.issue("broker-0", server=True)
    keystore = tmp_path / "keystore.pem"  # Kafka's PEM keystore: the key and the chain
    keystore.write_bytes(server.key_pem + server.certificate_pem)
    truststore = tmp_path / "truststore.pem"
    truststore.write_bytes(authority.certificate_pem)
    sidecar = sidecar_factory(
        tmp_path / "data",
        f"ssl.keystore.location={keystore}",
        f"ssl.truststore.location={truststore}",
        "ssl.client.auth=required",
        "ssl.keystore.type=PEM",
    )
    assert "client certificates required" in sidecar.output
    client = authority.issue("app-pod", server=False)
    with _tls_channel(sidecar.address, authority, client) as channel:
        admin = admin_service_pb2_grpc.AdminServiceStub(channel)
        admin.CreateTopics(
            admin_service_pb2.CreateTopicsRequest(topics=[admin_service_pb2.NewTopic(name="m")])
        )
        log = log_service_pb2_grpc.LogServiceStub(channel)
        batch = build_batch([SimpleRecord(b"k", b"v", 1_000, ())])
        log.Produce(log_service_pb2.ProduceRequest(topic="m", record_batches=batch))
        fetched = log.Fetch(log_service_pb2.FetchRequest(topic="m", offset=0))
        assert (len(fetched.record_batches), fetched.high_watermark) == (len(batch), 1)
    with _tls_channel(sidecar.address, authority) as anonymous:
        assert _refused(anonymous) == grpc.StatusCode.UNAVAILABLE
    impostor = stranger.issue("app-pod", server=False)
    with _tls_channel(sidecar.address, authority, impostor) as channel:
        assert _refused(channel) == grpc.StatusCode.UNAVAILABLE
    sidecar.assert_alive()


def test_a_bearer_token_is_required_on_every_call_but_health(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-t0ken\n")
    sidecar = sidecar_factory(tmp_path / "data", f"tierlog.auth.token.file={token_file}", METRICS)
    assert "bearer token required" in sidecar.output
    good: _Metadata = (("authorization", "Bearer s3cret-t0ken"),)
    with grpc.insecure_channel(sidecar.address) as channel:
        for metadata in ((), (("authorization", "Bearer guess"),), (("authorization", "s3cret"),)):
            with pytest.raises(grpc.RpcError) as refused:
                _list_topics(channel, metadata)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert reason_of(refused.value) == "SASL_AUTHENTICATION_FAILED"
        log = log_service_pb2_grpc.LogServiceStub(channel)
        produce = log_service_pb2.ProduceStreamRequest(
            produce=log_service_pb2.ProduceRequest(topic="t", record_batches=b"")
        )
        with pytest.raises(grpc.RpcError) as streamed:
            list(log.ProduceStream(iter([produce])))
        assert reason_of(streamed.value) == "SASL_AUTHENTICATION_FAILED"

        assert _list_topics(channel, good) == []
        health: Any = health_pb2_grpc.HealthStub(channel)  # typeshed: no methods
        # kubelet gRPC probes carry no token
        checked = health.Check(health_pb2.HealthCheckRequest(service=""))
        assert checked.status == health_pb2.HealthCheckResponse.SERVING

    found = scrape_sidecar(sidecar)
    refusals = {"grpc_service": "AdminService", "method": "ListTopics"}
    assert found.value("tierlog_requests_total", **refusals, code="UNAUTHENTICATED") == 3
    assert found.value("tierlog_requests_total", **refusals, code="OK") == 1
    assert found.value("tierlog_errors_total", **refusals, reason="SASL_AUTHENTICATION_FAILED") == 3
    sidecar.assert_alive()


def test_the_token_may_come_from_the_environment_with_mutual_tls(
    sidecar_factory: SidecarFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "from-a-secret")
    authority = Authority("tierlog test CA")
    certificate, key = authority.issue("broker-0", server=True).write(tmp_path, "tls")
    truststore = tmp_path / "ca.crt"
    truststore.write_bytes(authority.certificate_pem)
    sidecar = sidecar_factory(
        tmp_path / "data",
        f"ssl.keystore.location={certificate}",
        f"tierlog.ssl.keystore.key.location={key}",
        f"ssl.truststore.location={truststore}",
        "ssl.client.auth=required",
    )
    client = authority.issue("app-pod", server=False)
    with _tls_channel(sidecar.address, authority, client) as channel:
        assert _list_topics(channel, (("authorization", "Bearer from-a-secret"),)) == []
        with pytest.raises(grpc.RpcError) as refused:
            _list_topics(channel)
        assert reason_of(refused.value) == "SASL_AUTHENTICATION_FAILED"


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        ({"ssl.keystore.location": "/nonexistent.pem"}, "cannot read"),
        ({"ssl.keystore.location": "{ca}"}, "needs a PEM certificate chain and a private key"),
        ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "{both}"}, "only PEM"),
        ({"ssl.keystore.location": "{both}", "ssl.key.password": "x"}, "encrypted"),
        ({"ssl.keystore.location": "{both}", "ssl.client.auth": "required"}, "truststore"),
        ({"ssl.keystore.location": "{both}", "ssl.client.auth": "maybe"}, "ssl.client.auth"),
        ({"ssl.truststore.location": "{ca}"}, "without ssl.keystore.location"),
        ({"tierlog.auth.token.file": "{empty}"}, "is empty"),
    ],
)
def test_bad_security_settings_stop_the_start(
    tmp_path: Path, settings: dict[str, str], complaint: str
) -> None:
    authority = Authority("tierlog test CA")
    server = authority.issue("broker-0", server=True)
    files = {
        "ca": tmp_path / "ca.pem",
        "both": tmp_path / "both.pem",
        "empty": tmp_path / "empty",
    }
    files["ca"].write_bytes(authority.certificate_pem)
    files["both"].write_bytes(server.certificate_pem + server.key_pem)
    files["empty"].write_text("\n")
    props = {"log.dirs": str(tmp_path / "data")}
    props |= {key: value.format(**files) for key, value in settings.items()}
    with pytest.raises(InvalidConfigError, match=complaint):
        SidecarConfig.from_properties(props)


def test_the_token_never_shows_in_the_config_repr(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("do-not-log-me")
    config = SidecarConfig.from_properties(
        {"log.dirs": str(tmp_path), "tierlog.auth.token.file": str(token_file)}
    )
    assert config.auth_token == "do-not-log-me"
    assert "do-not-log-me" not in repr(config)
