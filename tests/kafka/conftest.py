"""A real ``tierlog-sidecar`` serving Kafka's wire protocol beside gRPC, for real clients.

``kafka_sidecar`` starts one with ``listeners=PLAINTEXT://127.0.0.1:PORT`` (and gRPC on
its own port, as every test's sidecar) and knows both addresses; topics are created over
gRPC with tierlog's admin client, so a Kafka client meets a topic it did not make.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sidecars import SidecarProcess, Sidecars, free_port
from tierlog.client.admin import AdminClient
from tierlog.client.cluster import Cluster
from tierlog.client.groups import GroupClient
from tierlog.coordinator.offsets_topic import partition_for_group


class KafkaSidecar(SidecarProcess):
    kafka_port: int = 0

    @property
    def kafka_address(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def create_topic(self, name: str, partitions: int = 1, **configs: str) -> None:
        with AdminClient({"bootstrap.servers": self.address}) as admin:
            admin.create_topic(
                name, partitions, {key.replace("_", "."): value for key, value in configs.items()}
            )

    def load_offsets_topic(self, partitions: int) -> None:
        """Create ``__consumer_offsets`` (of ``partitions``) and wait until each partition
        is loaded, through tierlog's GroupClient, which waits out
        COORDINATOR_LOAD_IN_PROGRESS as Kafka's clients do: a test's raw requests then
        meet a coordinator that is ready."""
        loaded: set[int] = set()
        probe = 0
        while len(loaded) < partitions:
            group = f"probe-{probe}"
            probe += 1
            if partition_for_group(group, partitions) not in loaded:
                GroupClient(Cluster([self.address]), group).committed()
                loaded.add(partition_for_group(group, partitions))


def start_kafka_sidecar(sidecars: Sidecars, data_dir: Path, *configs: str) -> KafkaSidecar:
    port = free_port()
    sidecar = KafkaSidecar(data_dir, (f"listeners=PLAINTEXT://127.0.0.1:{port}", *configs))
    sidecar.kafka_port = port
    sidecars.add(sidecar).start()
    assert f"serving Kafka's wire protocol on 127.0.0.1:{port}" in sidecar.output
    return sidecar


@pytest.fixture
def sidecars() -> Iterator[Sidecars]:
    started = Sidecars()
    try:
        yield started
    finally:
        started.kill_all()


@pytest.fixture
def kafka_sidecar(sidecars: Sidecars, tmp_path: Path) -> KafkaSidecar:
    return start_kafka_sidecar(sidecars, tmp_path / "data")
