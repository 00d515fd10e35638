"""Three real brokers replicating over a shared partition-state store on loopback.

``replicated_brokers(count, *configs)`` starts ``count`` ``tierlog-sidecar`` processes on
free ports, each told the whole broker list and the store's directory
(``tierlog.replication.state.dir``); the test plays the controller where it needs one,
changing partition state in the same store (``Cluster.store``) as the controller would.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sidecar.conftest import Sidecar
from tests.support.sidecars import Sidecars, free_port
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import PartitionState


@dataclass
class Cluster:
    brokers: list[Sidecar]
    store: LocalStateStore
    state_dir: Path

    def broker(self, node_id: int) -> Sidecar:
        return self.brokers[node_id]

    def create_topic(self, topic: str, replicas: tuple[int, ...], partitions: int = 1) -> None:
        """The topic's state as the controller records it; every broker picks it up."""
        self.store.create_topic(topic, {p: PartitionState.new(replicas) for p in range(partitions)})

    def state(self, topic: str, partition: int = 0) -> PartitionState:
        return self.store.read_topic(topic)[partition]


def wait_for(condition: Callable[[], object], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


ClusterFactory = Callable[..., Cluster]


@pytest.fixture
def replicated_brokers(tmp_path: Path) -> Iterator[ClusterFactory]:
    started = Sidecars()

    def start(count: int = 3, *configs: str) -> Cluster:
        ports = [free_port() for _ in range(count)]
        listed = ",".join(f"{node}@127.0.0.1:{port}" for node, port in enumerate(ports))
        state_dir = tmp_path / "state"
        brokers = []
        for node, port in enumerate(ports):
            sidecar = Sidecar(
                tmp_path / f"broker-{node}",
                (
                    f"node.id={node}",
                    f"tierlog.cluster.brokers={listed}",
                    f"tierlog.replication.state.dir={state_dir}",
                    "tierlog.replication.state.poll.ms=20",
                    "replica.fetch.backoff.ms=100",
                    *configs,
                ),
                port=port,
            )
            brokers.append(started.add(sidecar.start()))
        return Cluster(brokers, LocalStateStore(state_dir), state_dir)

    yield start
    started.kill_all()
