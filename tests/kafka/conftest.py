"""A real ``tierlog-sidecar`` serving Kafka's wire protocol beside gRPC, for real clients.

``kafka_sidecar`` starts one with ``listeners=PLAINTEXT://127.0.0.1:PORT`` (and gRPC on
its own port, as every test's sidecar) and knows both addresses; topics are created over
gRPC with tierlog's admin client, so a Kafka client meets a topic it did not make.
``running_cluster`` is a ``tierlog cluster up`` of several brokers, each with a Kafka
listener, as a user starts one.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from tests.interop.kafka import kafka_tools
from tests.kafka.wire import KafkaWire
from tests.support.sidecars import SidecarProcess, Sidecars, free_port
from tierlog.client.admin import AdminClient
from tierlog.client.cluster import Cluster
from tierlog.client.groups import GroupClient
from tierlog.coordinator.offsets_topic import partition_for_group


def java(main_class: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """One of Kafka's own Java programs (from the jars the tests fetch), run to its end."""
    return subprocess.run(
        kafka_tools().command(main_class, *args),
        input=stdin,
        capture_output=True,
        encoding="utf-8",
        timeout=180,
        check=False,
    )


def run_java(main_class: str, *args: str, stdin: str = "") -> str:
    """What a Java program printed; it must succeed."""
    done = java(main_class, *args, stdin=stdin)
    assert done.returncode == 0, f"{main_class} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def printed_table(printed: str) -> list[dict[str, str]]:
    """A Kafka tool's tab-separated table (``kafka-transactions``), one dict per row."""
    header, *rows = (line.split("\t") for line in printed.splitlines() if line.strip())
    names = [name.strip() for name in header]
    return [dict(zip(names, (cell.strip() for cell in row), strict=False)) for row in rows]


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


def unique_name(prefix: str) -> str:
    """A topic, group or transactional id no other test of the module's broker uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def start_kafka_sidecar(
    sidecars: Sidecars, data_dir: Path, *configs: str, protocol: str = "PLAINTEXT"
) -> KafkaSidecar:
    port = free_port()
    sidecar = KafkaSidecar(data_dir, (f"listeners={protocol}://127.0.0.1:{port}", *configs))
    sidecar.kafka_port = port
    sidecars.add(sidecar).start()
    assert f"serving Kafka's wire protocol on 127.0.0.1:{port}" in sidecar.output
    return sidecar


@pytest.fixture
def sidecars() -> Iterator[Sidecars]:
    with Sidecars() as started:
        yield started


@pytest.fixture
def kafka_sidecar(sidecars: Sidecars, tmp_path: Path) -> KafkaSidecar:
    return start_kafka_sidecar(sidecars, tmp_path / "data")


@pytest.fixture
def wire(broker: KafkaSidecar) -> Iterator[KafkaWire]:
    """A raw Kafka connection to the module's ``broker`` (each module that uses this
    starts its own, shared by its tests)."""
    connection = KafkaWire(broker.kafka_port)
    yield connection
    connection.close()


def read_partition(broker: KafkaSidecar, topic: str, isolation: str) -> list[tuple[int, bytes]]:
    """Every record a kafka-python consumer at ``isolation`` reads from partition 0, up to
    the end it is told (the last stable offset under read_committed)."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.kafka_address,
        isolation_level=isolation,
        enable_auto_commit=False,
    )
    tp = KafkaTopicPartition(topic, 0)
    read: list[tuple[int, bytes]] = []
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning()
        end = consumer.end_offsets([tp])[tp]
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"stuck at {consumer.position(tp)} of {end}"
            for records in consumer.poll(timeout_ms=1_000).values():
                read += [(m.offset, m.value) for m in records]
    finally:
        consumer.close()
    return read
