"""Replicas across racks: the brokers' racks come from the operator's plan (on Kubernetes,
the zones of their nodes), and a topic created on any broker spans them.

Four real brokers follow a plan (``tierlog.cluster.assignment.file``) that puts brokers
0 and 1 in zone a, 2 and 3 in zone b, and share a local partition-state store; a topic
created with replication factor 2 has each partition's two replicas in both zones. In
broker-id order, Kafka's striped placement without racks would pair 0 with 1 and 2 with
3: a zone's outage would take whole partitions.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.sidecar.conftest import Sidecar
from tests.support.sidecars import Sidecars, free_port
from tierlog.api.v1 import admin_service_pb2
from tierlog.broker.ownership import Broker, parse_assignment
from tierlog.partition_state.local_store import LocalStateStore

ZONES = {0: "zone-a", 1: "zone-a", 2: "zone-b", 3: "zone-b"}


def test_the_plan_names_each_brokers_rack() -> None:
    document = {
        "version": 1,
        "brokers": {"0": "b0:9092", "1": "b1:9092"},
        "topics": {},
        "racks": {"1": "zone-b"},
    }
    ownership = parse_assignment(json.dumps(document), 0)
    assert ownership.brokers == (Broker(0, "b0:9092"), Broker(1, "b1:9092", "zone-b"))


def test_a_topic_created_on_any_broker_spans_the_racks_of_the_plan(tmp_path: Path) -> None:
    ports = {node: free_port() for node in ZONES}
    plan = tmp_path / "assignment.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "generation": 1,
                "brokers": {str(node): f"127.0.0.1:{port}" for node, port in ports.items()},
                "topics": {},
                "racks": {str(node): zone for node, zone in ZONES.items()},
            }
        )
    )
    state = tmp_path / "state"
    with Sidecars() as started:
        brokers = [
            started.add(
                Sidecar(
                    tmp_path / f"broker-{node}",
                    (
                        f"node.id={node}",
                        f"tierlog.cluster.assignment.file={plan}",
                        f"tierlog.replication.state.dir={state}",
                    ),
                    port=port,
                ).start()
            )
            for node, port in ports.items()
        ]
        created = brokers[3].admin.CreateTopics(
            admin_service_pb2.CreateTopicsRequest(
                topics=[
                    admin_service_pb2.NewTopic(
                        name="orders", num_partitions=8, replication_factor=2
                    )
                ]
            )
        )
        assert not created.results[0].HasField("error"), created.results[0].error
        partitions = LocalStateStore(state).read_topic("orders")
        assert len(partitions) == 8
        for partition, placed in partitions.items():
            zones = sorted(ZONES[node] for node in placed.replicas)
            assert zones == ["zone-a", "zone-b"], (partition, placed.replicas)
