"""At most one broker away at a time; the network policy admits the listed clients, the
brokers and the operator."""

from __future__ import annotations

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


def test_a_cluster_with_tls_or_tokens_admits_no_kafka_port(owner: Owner) -> None:
    """The Kafka listener is plaintext without authentication: not served there."""
    for spec in (
        {"tls": {"secretName": "events-tls"}},
        {"authentication": {"tokenSecret": {"name": "events-token"}}},
    ):
        cluster = ClusterSpec.from_resource(resource(**spec))
        grpc = network_policy(cluster, owner, OperatorPeer())["spec"]["ingress"][0]
        assert grpc["ports"] == [{"port": 9092, "protocol": "TCP"}]
