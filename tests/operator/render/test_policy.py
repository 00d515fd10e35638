"""At most one broker away at a time; the network policy admits the listed clients, the
brokers and the operator."""

from __future__ import annotations

from dataclasses import replace

from tests.operator.render.conftest import resource
from tierlog.operator.config import OperatorPeer
from tierlog.operator.render.common import Owner, selector_labels
from tierlog.operator.render.policy import network_policy, pod_disruption_budget
from tierlog.operator.spec import ClusterSpec


def test_pod_disruption_budget_allows_one_broker_down(bare: ClusterSpec, owner: Owner) -> None:
    budget = pod_disruption_budget(bare, owner)
    assert budget["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": selector_labels(bare)},
    }


def test_network_policy_admits_listed_clients_and_peers(full: ClusterSpec, owner: Owner) -> None:
    policy = network_policy(full, owner, OperatorPeer())["spec"]
    grpc, metrics = policy["ingress"]
    # gRPC and Kafka's wire protocol, from the same clients
    assert grpc["ports"] == [{"port": 9092, "protocol": "TCP"}, {"port": 19092, "protocol": "TCP"}]
    assert {"podSelector": {"matchLabels": selector_labels(full)}} in grpc["from"]
    assert {"podSelector": {"matchLabels": {"c": "1"}}, "namespaceSelector": {}} in grpc["from"]
    assert metrics == {"ports": [{"port": 9404, "protocol": "TCP"}]}


def test_network_policy_admits_the_operators_pods_to_the_grpc_port(
    full: ClusterSpec, owner: Owner
) -> None:
    """It drains brokers, asks whether a restart is safe and administers topics there."""
    operator = OperatorPeer("ops", {"app.kubernetes.io/component": "operator", "r": "x"})
    grpc = network_policy(full, owner, operator)["spec"]["ingress"][0]
    assert {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/component": "operator", "r": "x"}},
    } in grpc["from"]


def test_tls_and_tokens_change_nothing_the_policy_admits(full: ClusterSpec, owner: Owner) -> None:
    """The Kafka listener secures itself (TLS, SASL), as the gRPC port does: the same
    ports, from the same peers."""
    tls = ClusterSpec.from_resource(resource(tls={"secretName": "events-tls"})).tls
    tokens = {"tokenSecret": {"name": "events-token"}}
    token = ClusterSpec.from_resource(resource(authentication=tokens)).token
    plain = network_policy(full, owner, OperatorPeer())
    for secured in (
        replace(full, tls=tls),
        replace(full, token=token),
        replace(full, tls=tls, token=token),
    ):
        assert network_policy(secured, owner, OperatorPeer()) == plain
