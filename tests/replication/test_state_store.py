"""The partition-state store a broker's config names: on Kubernetes, the API server.

Two real brokers told ``tierlog.replication.state.store=kubernetes`` (credentials from
``$KUBECONFIG``, as a pod's come from its service account) keep their leases as
``coordination.k8s.io`` Leases of the session's real API server and replicate a topic
whose state is in its ConfigMaps there: an ``acks=all`` produce to the leader
is answered once the follower holds it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.sidecar.conftest import Sidecar
from tests.support.applied_states import has_applied
from tests.support.kube import ControlPlane
from tests.support.sidecars import Sidecars, free_port
from tests.support.state_stores import open_store
from tierlog.api.v1 import log_service_pb2
from tierlog.partition_state.model import PartitionState
from tierlog.replication.config import (
    DirectoryStore,
    KubernetesStore,
    ReplicationConfig,
)
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.records import SimpleRecord, build_batch, decode_records, iter_batches

from .conftest import wait_for

CLUSTER = "demo"


def test_the_store_is_a_directory_by_default_or_the_kubernetes_api() -> None:
    local = ReplicationConfig.from_properties({"tierlog.replication.state.dir": "state"})
    assert local is not None and local.store == DirectoryStore(Path("state").absolute())
    kube = ReplicationConfig.from_properties(
        {
            "tierlog.replication.state.store": "kubernetes",
            "tierlog.replication.state.namespace": "events",
            "tierlog.replication.state.cluster": "demo",
        }
    )
    assert kube is not None and kube.store == KubernetesStore("events", "demo")
    assert ReplicationConfig.from_properties({}) is None


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"tierlog.replication.state.store": "etcd"}, "directory or kubernetes"),
        (
            {
                "tierlog.replication.state.store": "kubernetes",
                "tierlog.replication.state.namespace": "events",
            },
            "needs tierlog.replication.state.namespace and tierlog.replication.state.cluster",
        ),
        (
            {
                "tierlog.replication.state.store": "kubernetes",
                "tierlog.replication.state.dir": "state",
                "tierlog.replication.state.namespace": "events",
                "tierlog.replication.state.cluster": "demo",
            },
            "names a directory store",
        ),
    ],
)
def test_a_store_named_wrong_is_refused_by_name(props: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        ReplicationConfig.from_properties(props)


def _produce_all(broker: Sidecar, *values: bytes) -> log_service_pb2.ProduceResponse:
    now = int(time.time() * 1000)
    batch = build_batch([SimpleRecord(None, value, now, ()) for value in values])
    response: log_service_pb2.ProduceResponse = broker.log.Produce(
        log_service_pb2.ProduceRequest(
            topic="orders", partition=0, acks=log_service_pb2.ACKS_ALL, record_batches=batch
        ),
        timeout=20,
    )
    return response


def _follower_values(broker: Sidecar) -> list[bytes]:
    values = []
    for path in sorted((broker.data_dir / "orders-0").glob("*.log")):
        data = path.read_bytes()
        values += [r.value or b"" for h in iter_batches(data) for r in decode_records(data, h)]
    return values


def test_brokers_replicate_over_the_api_servers_configmap_and_leases(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    namespace = control_plane.create_namespace("kube-store")
    ports = [free_port() for _ in range(2)]
    listed = ",".join(f"{node}@127.0.0.1:{port}" for node, port in enumerate(ports))
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    with Sidecars() as started:
        brokers = [
            started.add(
                Sidecar(
                    tmp_path / f"broker-{node}",
                    (
                        f"node.id={node}",
                        f"tierlog.cluster.brokers={listed}",
                        "tierlog.replication.state.store=kubernetes",
                        f"tierlog.replication.state.namespace={namespace}",
                        f"tierlog.replication.state.cluster={CLUSTER}",
                        "replica.fetch.backoff.ms=100",
                    ),
                    port=port,
                    env=env,
                ).start()
            )
            for node, port in enumerate(ports)
        ]
        leases = control_plane.get_json("leases", "-n", namespace)["items"]
        holders = {lease["metadata"]["name"]: lease["spec"]["holderIdentity"] for lease in leases}
        assert sorted(holders) == [f"{CLUSTER}-broker-0", f"{CLUSTER}-broker-1"]
        assert all(holders[f"{CLUSTER}-broker-{n}"].startswith(f"broker-{n}-") for n in (0, 1))

        store = open_store("kube", f"{control_plane.kubeconfig} {namespace} {CLUSTER}")
        store.create_topic("orders", {0: PartitionState.new((0, 1))})
        wait_for(lambda: (brokers[1].data_dir / "orders-0").is_dir(), "broker 1 to follow orders-0")
        wait_for(
            lambda: has_applied(brokers[0].log, 0, "orders", 0, 0, 0), "broker 0 to lead orders-0"
        )
        assert _produce_all(brokers[0], b"a", b"b").base_offset == 0
        assert _produce_all(brokers[0], b"c", b"d").base_offset == 2
        # acks=all answered: the follower holds both batches (it is in the ISR).
        assert _follower_values(brokers[1])[:4] == [b"a", b"b", b"c", b"d"]
        assert store.read_topic("orders")[0].isr == (0, 1)
        # The store's requests (several a second) are not logged one line each.
        assert "HTTP Request" not in brokers[1].output, brokers[1].output[-2000:]
