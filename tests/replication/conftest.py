"""Three real brokers replicating over a shared partition-state store on loopback.

``replicated_brokers(count, *configs)`` starts ``count`` ``tierlog-sidecar`` processes on
free ports, each told the whole broker list and the store's directory
(``tierlog.replication.state.dir``); the test plays the controller where it needs one,
changing partition state in the same store (``Cluster.store``) as the controller would.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sidecar.conftest import Sidecar
from tests.support.applied_states import has_applied
from tests.support.process_faults import paused
from tests.support.sidecars import Sidecars, free_port
from tests.support.tcp_fault_proxy import TcpFaultProxy
from tierlog.api.v1.log_service_pb2_grpc import LogServiceStub
from tierlog.client import Consumer, TopicPartition
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import PartitionState


@dataclass
class Cluster:
    brokers: list[Sidecar]
    store: LocalStateStore
    state_dir: Path
    # With ``proxied``: every broker is listed (to clients and to the other brokers) at
    # its route of this TCP fault proxy, route ``broker-N``, so a test can cut it off.
    proxy: TcpFaultProxy | None = None

    def broker(self, node_id: int) -> Sidecar:
        return self.brokers[node_id]

    def create_topic(self, topic: str, replicas: tuple[int, ...], partitions: int = 1) -> None:
        """The topic's state as the controller records it (with this replica order);
        returns once every broker running has applied it (``wait_until_applied``), so
        the leader takes a produce and a follower refuses one as NOT_LEADER_OR_FOLLOWER.
        Naming the leaders in Metadata is not enough: until it has applied the state a
        broker says LEADER_NOT_AVAILABLE (a test that produced then failed in CI)."""
        states = {p: PartitionState.new(replicas) for p in range(partitions)}
        self.store.create_topic(topic, states)
        for partition in range(partitions):
            self.wait_until_applied(topic, partition)

    def wait_until_applied(
        self, topic: str, partition: int = 0, nodes: Iterable[int] | None = None
    ) -> None:
        """Until each of ``nodes`` (by default every broker running) has taken its role in
        the partition's state as the store has it (``has_applied``): a broker's Metadata
        names a state (a new topic's, a new leader's, a new epoch's) as soon as it has
        read it, and its answers follow that state only once it has applied it, later.
        A test that then acts through a raw request, which no client retries, waits
        for this first."""
        running = [n for n, broker in enumerate(self.brokers) if broker.process.poll() is None]
        for node in running if nodes is None else nodes:
            log = self.broker(node).log

            def applied(node: int = node, log: LogServiceStub = log) -> bool:
                state = self.state(topic, partition)
                return has_applied(log, node, topic, partition, state.leader, state.leader_epoch)

            wait_for(applied, f"broker {node} to apply the state of {topic}-{partition}")

    @property
    def servers(self) -> str:
        """The bootstrap list (the proxy's routes when proxied)."""
        if self.proxy is not None:
            return ",".join(self.proxy.address(f"broker-{n}") for n in range(len(self.brokers)))
        return ",".join(broker.address for broker in self.brokers)

    def read_values(self, topic: str, count: int) -> list[bytes]:
        """Partition 0's first ``count`` values, read by a consumer from whoever leads."""
        consumer = Consumer({"bootstrap.servers": self.servers, "auto.offset.reset": "earliest"})
        try:
            consumer.assign([TopicPartition(topic, 0)])
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(values) < count and time.monotonic() < deadline:
                values += [record.value or b"" for record in consumer.poll(500)]
            return values
        finally:
            consumer.close()

    def state(self, topic: str, partition: int = 0) -> PartitionState:
        return self.store.read_topic(topic)[partition]

    def paused(self, node_id: int) -> contextlib.AbstractContextManager[None]:
        """The broker SIGSTOPped for the block, where it holds none of the store's locks
        (a pause of the broker, not of the file-lock store: ``process_faults``)."""
        return paused(self.broker(node_id).process.pid, outside_locks_under=self.state_dir)


def wait_for(
    condition: Callable[[], object], what: str, timeout_s: float = 30, poll_s: float = 0.02
) -> None:
    """Until ``condition()``; ``poll_s`` longer where one look is costly."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll_s)


ClusterFactory = Callable[..., Cluster]


@pytest.fixture
def replicated_brokers(tmp_path: Path) -> Iterator[ClusterFactory]:
    started = Sidecars()
    proxies: list[TcpFaultProxy] = []

    def start(
        count: int = 3,
        *configs: str,
        proxied: bool = False,
        node_configs: Mapping[int, Sequence[str]] | None = None,
    ) -> Cluster:
        """``configs`` for every broker, then ``node_configs[n]`` for broker ``n`` (later
        ones win)."""
        ports = [free_port() for _ in range(count)]
        proxy = None
        addresses = [f"127.0.0.1:{port}" for port in ports]
        if proxied:
            proxy = TcpFaultProxy.start({f"broker-{n}": a for n, a in enumerate(addresses)})
            proxies.append(proxy)
            addresses = [proxy.address(f"broker-{n}") for n in range(count)]
        listed = ",".join(f"{node}@{address}" for node, address in enumerate(addresses))
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
                    *(node_configs or {}).get(node, ()),
                ),
                port=port,
            )
            brokers.append(started.add(sidecar.start()))
        return Cluster(brokers, LocalStateStore(state_dir), state_dir, proxy)

    yield start
    started.kill_all()
    for proxy in proxies:
        proxy.close()
