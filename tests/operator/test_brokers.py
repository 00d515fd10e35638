"""The operator's calls to one broker, with the broker's security: a real sidecar asking
for mutual TLS and a token, its certificate naming only the pod's DNS name."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.certs import Authority
from tests.support.sidecars import SidecarProcess, Sidecars
from tierlog.api.errors import SaslAuthenticationFailedError
from tierlog.client import ChannelSecurity, NetworkError
from tierlog.operator import brokers
from tierlog.operator.spec import TopicSpec
from tierlog.operator.topic_sync import BrokerTopic, TopicChanges

POD_NAME = "demo-0.demo-brokers.ns.svc"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[str, ChannelSecurity]]:
    """A sidecar with mutual TLS and a token; the operator's security for it."""
    authority = Authority("demo CA")
    server = authority.issue("demo-0", server=True, hosts=[POD_NAME], loopback=False)
    certificate, key = server.write(tmp_path, "tls")
    (tmp_path / "ca.crt").write_bytes(authority.certificate_pem)
    (tmp_path / "token").write_text("s3cret\n")
    started = Sidecars()
    sidecar = SidecarProcess(
        tmp_path / "data",
        (
            f"ssl.keystore.location={certificate}",
            f"tierlog.ssl.keystore.key.location={key}",
            f"ssl.truststore.location={tmp_path / 'ca.crt'}",
            "ssl.client.auth=required",
            f"tierlog.auth.token.file={tmp_path / 'token'}",
        ),
    )
    started.add(sidecar.start())
    operator = authority.issue("tierlog-operator", server=False)
    security = ChannelSecurity(
        True,
        authority.certificate_pem,
        operator.certificate_pem,
        operator.key_pem,
        "s3cret",
        server_name=POD_NAME,
    )
    try:
        yield sidecar.address, security
    finally:
        started.kill_all()


def test_every_call_goes_through_with_the_brokers_security(
    secured: tuple[str, ChannelSecurity],
) -> None:
    address, security = secured
    orders = TopicSpec("orders", "demo", 2, {"retention.ms": "60000"})

    async def calls() -> None:
        await brokers.apply_topic(address, orders, TopicChanges(create=True), security=security)
        assert await brokers.read_topic(address, "orders", security=security) == BrokerTopic(
            2, {"retention.ms": "60000"}
        )
        assert await brokers.owned_partitions(address, ["orders"], security=security) == 2
        assert (await brokers.prepare_restart(address, security=security)).safe
        await brokers.delete_topic(address, "orders", security=security)
        assert await brokers.read_topic(address, "orders", security=security) == BrokerTopic(None)

    asyncio.run(calls())


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"token": None}, SaslAuthenticationFailedError),
        ({"certificate_chain": None, "private_key": None}, NetworkError),  # no handshake
        ({"server_name": None}, NetworkError),  # 127.0.0.1 is not in its certificate
        ({"tls": False}, NetworkError),
    ],
)
def test_without_part_of_it_the_broker_refuses(
    secured: tuple[str, ChannelSecurity], change: dict[str, Any], refusal: type[Exception]
) -> None:
    address, security = secured
    with pytest.raises(refusal):
        asyncio.run(brokers.prepare_restart(address, security=replace(security, **change)))
