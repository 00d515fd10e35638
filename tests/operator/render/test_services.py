"""Services: per-broker DNS through the headless one, a stable one for clients."""

from __future__ import annotations

from tests.operator.render.conftest import resource
from tierlog.operator.render.common import (
    Owner,
    broker_address,
    broker_kafka_address,
    selector_labels,
)
from tierlog.operator.render.services import client_service, headless_service
from tierlog.operator.spec import ClusterSpec


def test_headless_service_publishes_brokers_before_they_are_ready(
    bare: ClusterSpec, owner: Owner
) -> None:
    service = headless_service(bare, owner)
    assert service["metadata"]["name"] == "events-brokers"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == selector_labels(bare)
    assert broker_address(bare, 2) == "events-2.events-brokers.prod.svc:9092"
    assert broker_kafka_address(bare, 2) == "events-2.events-brokers.prod.svc:19092"
    kafka = {"name": "kafka", "port": 19092, "targetPort": "kafka", "protocol": "TCP"}
    assert kafka in service["spec"]["ports"]


def test_client_service_balances_over_ready_brokers(bare: ClusterSpec, owner: Owner) -> None:
    service = client_service(bare, owner)
    assert service["metadata"]["name"] == "events"
    assert "clusterIP" not in service["spec"]
    assert {port["port"] for port in service["spec"]["ports"]} == {9092, 9404, 19092}


def test_a_cluster_with_tls_and_tokens_has_the_kafka_port(owner: Owner) -> None:
    cluster = ClusterSpec.from_resource(
        resource(tls={"secretName": "events-tls"}, authentication={"tokenSecret": {"name": "t"}})
    )
    for service in (client_service(cluster, owner), headless_service(cluster, owner)):
        assert {port["port"] for port in service["spec"]["ports"]} == {9092, 9404, 19092}
