"""FindCoordinator through the Kafka listener, read off the wire with kio at every version
served: the broker that leads the key's partition of ``__consumer_offsets`` (groups) or
``__transaction_state`` (transactional ids), the same node the gRPC FindCoordinator
names, with its Kafka address; v4+ batches keys. A coordinator whose Kafka address is
not known here is COORDINATOR_NOT_AVAILABLE, as Kafka answers a coordinator it cannot
reach, and a key type no coordinator here serves is INVALID_REQUEST."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka.conftest import KafkaSidecar, start_kafka_sidecar
from tests.kafka.wire import KafkaWire
from tests.support.sidecars import Sidecars, free_port
from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.api.v1 import group_service_pb2_grpc
from tierlog.client.rpc import open_channel

FIND_COORDINATOR = 10
GROUP, TRANSACTION, SHARE = 0, 1, 2
PARTITIONS = 3  # offsets.topic.num.partitions and transaction.state.log.num.partitions
CONFIGS = (
    f"offsets.topic.num.partitions={PARTITIONS}",
    f"transaction.state.log.num.partitions={PARTITIONS}",
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSidecar]:
    with Sidecars() as started:
        yield start_kafka_sidecar(started, tmp_path_factory.mktemp("find") / "data", *CONFIGS)


def _grpc_coordinator(
    broker: KafkaSidecar, key: str, key_type: pb.CoordinatorType.ValueType
) -> int:
    with open_channel(broker.address) as channel:
        found = group_service_pb2_grpc.GroupServiceStub(channel).FindCoordinator(
            pb.FindCoordinatorRequest(key=key, key_type=key_type)
        )
    node_id: int = found.node_id
    return node_id


@pytest.mark.parametrize("version", [1, 2, 3])
def test_one_key_per_request_up_to_v3(broker: KafkaSidecar, wire: KafkaWire, version: int) -> None:
    for key_type, grpc_type in (
        (GROUP, pb.COORDINATOR_TYPE_GROUP),
        (TRANSACTION, pb.COORDINATOR_TYPE_TRANSACTION),
    ):
        found = wire.call(FIND_COORDINATOR, version, {"key": "payments", "key_type": key_type})
        assert found.error_code == ErrorCode.none
        assert found.node_id == _grpc_coordinator(broker, "payments", grpc_type)
        assert (found.host, found.port) == ("127.0.0.1", broker.kafka_port)


@pytest.mark.parametrize("version", [4, 5, 6])
def test_a_batch_of_keys_from_v4(broker: KafkaSidecar, wire: KafkaWire, version: int) -> None:
    keys = ("payments", "billing", "audit")
    for key_type in (GROUP, TRANSACTION):
        found = wire.call(
            FIND_COORDINATOR, version, {"key_type": key_type, "coordinator_keys": keys}
        )
        assert [c.key for c in found.coordinators] == list(keys)
        for coordinator in found.coordinators:
            assert coordinator.error_code == ErrorCode.none
            assert (coordinator.host, coordinator.port) == ("127.0.0.1", broker.kafka_port)


def test_share_groups_and_empty_group_ids_are_refused(wire: KafkaWire) -> None:
    share = wire.call(FIND_COORDINATOR, 6, {"key_type": SHARE, "coordinator_keys": ("g",)})
    assert [c.error_code for c in share.coordinators] == [ErrorCode.invalid_request]
    assert share.coordinators[0].node_id == -1
    empty = wire.call(FIND_COORDINATOR, 3, {"key": "", "key_type": GROUP})
    assert empty.error_code == ErrorCode.invalid_group_id


def test_a_coordinator_whose_kafka_address_is_unknown_is_not_available(
    tmp_path: Path,
) -> None:
    """Two unreplicated brokers split ``__consumer_offsets`` by the broker list (the
    second need not run): a group on broker 1, whose Kafka address broker 0 does not
    know, is COORDINATOR_NOT_AVAILABLE with Kafka's no-node (-1, "", -1); a group on
    broker 0 is answered."""
    brokers = f"0@127.0.0.1:{free_port()},1@127.0.0.1:{free_port()}"
    with Sidecars() as started:
        sidecar = start_kafka_sidecar(
            started, tmp_path / "b0", *CONFIGS, "node.id=0", f"tierlog.cluster.brokers={brokers}"
        )
        groups = [f"group-{i}" for i in range(12)]
        wire = KafkaWire(sidecar.kafka_port)
        try:
            found = wire.call(
                FIND_COORDINATOR, 4, {"key_type": GROUP, "coordinator_keys": tuple(groups)}
            )
        finally:
            wire.close()
        codes = {c.key: c.error_code for c in found.coordinators}
        assert set(codes.values()) == {ErrorCode.none, ErrorCode.coordinator_not_available}
        for coordinator in found.coordinators:
            owner = _grpc_coordinator(sidecar, coordinator.key, pb.COORDINATOR_TYPE_GROUP)
            if owner == 0:
                assert coordinator.node_id == 0
            else:
                assert coordinator.error_code == ErrorCode.coordinator_not_available
                assert (coordinator.node_id, coordinator.host, coordinator.port) == (-1, "", -1)
