"""A running broker takes the operator's plan from a push at once, and from its file
later, never stepping back to an older one: a real sidecar following a real file."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.support.sidecars import Sidecars, free_port
from tierlog.api.v1 import admin_service_pb2, common_pb2, log_service_pb2

from .conftest import Sidecar, reason_of

OTHER = "127.0.0.1:1"  # broker 1 of the plans: never dialled here


def plan(generation: int, owners: list[int], *, me: str, brokers: int = 2) -> str:
    """An ``assignment.json`` as the operator writes it: ``orders`` placed on ``owners``."""
    document = {
        "version": 1,
        "generation": generation,
        "brokers": {"0": me, **{str(node): OTHER for node in range(1, brokers)}},
        "topics": {"orders": owners},
    }
    return json.dumps(document)


def write(path: Path, document: str) -> None:
    path.with_suffix(".tmp").write_text(document)
    path.with_suffix(".tmp").replace(path)  # as the kubelet swaps a ConfigMap's files


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Sidecar]:
    """Broker 0 of two, following ``tmp_path/assignment.json`` (generation 5: ``[0, 1]``),
    with the topic ``orders`` of two partitions."""
    port = free_port()
    write(tmp_path / "assignment.json", plan(5, [0, 1], me=f"127.0.0.1:{port}"))
    with Sidecars() as started:
        sidecar = started.add(
            Sidecar(
                tmp_path / "b0",
                ("node.id=0", f"tierlog.cluster.assignment.file={tmp_path / 'assignment.json'}"),
                port,
            ).start()
        )
        sidecar.create_topic("orders", partitions=2)
        yield sidecar


def push(broker: Sidecar, document: str) -> admin_service_pb2.UpdateAssignmentResponse:
    request = admin_service_pb2.UpdateAssignmentRequest(document=document)
    answer: admin_service_pb2.UpdateAssignmentResponse = broker.admin.UpdateAssignment(request)
    return answer


def owners(broker: Sidecar) -> list[int]:
    metadata = broker.admin.Metadata(admin_service_pb2.MetadataRequest(topics=["orders"]))
    return [partition.leader_id for partition in metadata.topics[0].partitions]


def wait_for_owners(broker: Sidecar, expected: list[int]) -> None:
    deadline = time.monotonic() + 20
    while owners(broker) != expected:
        assert time.monotonic() < deadline, f"never {expected}: {broker.output[-2000:]}"
        time.sleep(0.1)


def wait_for_log(broker: Sidecar, line: str) -> None:
    deadline = time.monotonic() + 20
    while line not in broker.output:
        assert time.monotonic() < deadline, f"never logged {line!r}: {broker.output[-2000:]}"
        time.sleep(0.1)


def test_a_newer_pushed_plan_is_followed_at_once_with_the_logs_it_gives(
    broker: Sidecar,
) -> None:
    assert owners(broker) == [0, 1]

    answer = push(broker, plan(6, [0, 0], me=broker.address))

    assert (answer.node_id, answer.generation, answer.adopted) == (0, 6, True)
    assert owners(broker) == [0, 0]  # no waiting for the file
    produced = broker.log.Produce(
        log_service_pb2.ProduceRequest(
            topic="orders",
            partition=1,
            records=log_service_pb2.RecordList(records=[common_pb2.Record(value=b"moved")]),
        )
    )
    assert produced.base_offset == 0


def test_a_push_of_the_same_or_an_older_generation_changes_nothing(broker: Sidecar) -> None:
    for generation in (5, 4):
        answer = push(broker, plan(generation, [1, 1], me=broker.address))
        assert (answer.generation, answer.adopted) == (5, False)
        assert owners(broker) == [0, 1]


def test_the_file_never_takes_a_broker_back_behind_a_push(broker: Sidecar, tmp_path: Path) -> None:
    assert push(broker, plan(7, [0, 0], me=broker.address)).adopted
    path = tmp_path / "assignment.json"

    write(path, plan(6, [1, 1], me=broker.address))  # the kubelet, late, with an older plan
    wait_for_log(broker, f"keeping the partition assignment of generation 7: {path} still holds 6")
    assert owners(broker) == [0, 0]

    # At the same generation the file wins: it is what a restart would read.
    write(path, plan(7, [1, 0], me=broker.address))
    wait_for_owners(broker, [1, 0])
    assert not push(broker, plan(7, [0, 0], me=broker.address)).adopted
    assert owners(broker) == [1, 0]

    write(path, plan(8, [0, 1], me=broker.address))  # a newer plan by the file alone
    wait_for_owners(broker, [0, 1])


@pytest.mark.parametrize(
    "document",
    [
        "{not json",
        '["a list"]',
        json.dumps({"version": 2, "generation": 9, "brokers": {}, "topics": {}}),
        json.dumps({"version": 1, "generation": 9, "brokers": {"1": OTHER}, "topics": {}}),
        json.dumps({"version": 1, "generation": 9, "brokers": {"0": "a:1"}, "topics": {"t": [3]}}),
    ],
    ids=["not-json", "not-an-object", "unknown-version", "not-listing-me", "unknown-owner"],
)
def test_a_pushed_document_this_broker_cannot_follow_is_an_invalid_request(
    broker: Sidecar, document: str
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        push(broker, document)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(raised.value) == "INVALID_REQUEST"
    assert owners(broker) == [0, 1]


def test_metadata_names_the_owner_as_every_replica_and_a_moving_partition_none(
    broker: Sidecar,
) -> None:
    assert push(broker, plan(6, [1, -1], me=broker.address)).adopted
    metadata = broker.admin.Metadata(admin_service_pb2.MetadataRequest(topics=["orders"]))
    assert [
        (p.leader_id, p.leader_epoch, list(p.replicas), list(p.isr))
        for p in metadata.topics[0].partitions
    ] == [(1, 0, [1], [1]), (-1, -1, [], [])]
