"""The transaction coordinator inside a real sidecar server whose ownership plan the test
changes: a commit whose markers cannot be written (its partition's owner is unreachable)
stays prepared, and when the coordinator's leadership changes meanwhile, the new
leadership completes it once the partition is reachable again, with its own epoch. A
transactional batch's verification (KIP-890) is asked once while the partition stays
as it was, asked again after a marker, and NOT_ENOUGH_REPLICAS (retriable) while the
coordinator is out of reach."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support.transaction_markers import Marker, markers
from tierlog.api.errors import NotEnoughReplicasError
from tierlog.api.v1 import admin_service_pb2, admin_service_pb2_grpc, transaction_service_pb2_grpc
from tierlog.api.v1 import transaction_service_pb2 as pb
from tierlog.broker.ownership import Broker
from tierlog.coordinator.transaction_metrics import TransactionMetrics
from tierlog.coordinator.transaction_records import TransactionState
from tierlog.coordinator.transaction_topic import TRANSACTION_STATE_TOPIC
from tierlog.sidecar.config import SidecarConfig
from tierlog.sidecar.server import SidecarServer
from tierlog.storage.errors import InvalidTxnStateError
from tierlog.storage.records import SimpleRecord, build_batch, iter_batches, read_end_txn_marker
from tierlog.storage.topic_partition import TopicPartition

UNREACHABLE = Broker(9, "127.0.0.1:1")


async def _until_loaded(call: Any) -> Any:
    """``call()`` until the coordinator's partition has loaded."""
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as error:
            if "COORDINATOR_LOAD_IN_PROGRESS" not in (error.details() or ""):
                raise
        await asyncio.sleep(0.01)  # the load runs on the server's loop: look again


Scenario = Callable[[SidecarServer, Any], Awaitable[None]]


def _run(tmp_path: Path, scenario: Scenario) -> None:
    """``scenario`` against a sidecar server on this test's loop, with a topic ``orders``
    (one partition) and a TransactionService stub."""
    config = SidecarConfig.from_properties(
        {
            "log.dirs": str(tmp_path / "data"),
            "listeners": "127.0.0.1:0",
            "transaction.state.log.num.partitions": "1",
        }
    )

    async def run() -> None:
        server = SidecarServer(config)
        await server.start()
        try:
            async with grpc.aio.insecure_channel(server.address) as channel:
                await admin_service_pb2_grpc.AdminServiceStub(channel).CreateTopics(
                    admin_service_pb2.CreateTopicsRequest(
                        topics=[admin_service_pb2.NewTopic(name="orders", num_partitions=1)]
                    )
                )
                stub: Any = transaction_service_pb2_grpc.TransactionServiceStub(channel)
                await asyncio.wait_for(scenario(server, stub), timeout=30)
        finally:
            await server.stop()

    asyncio.run(run())


async def _begin(stub: Any) -> tuple[int, int]:
    """Producer "t" initialised, orders-0 added to its transaction: (id, epoch)."""
    init = await _until_loaded(
        lambda: stub.InitProducerId(
            pb.TransactionServiceInitProducerIdRequest(
                transactional_id="t", transaction_timeout_ms=60_000
            )
        )
    )
    await stub.AddPartitionsToTxn(
        pb.AddPartitionsToTxnRequest(
            transactional_id="t",
            producer_id=init.producer_id,
            producer_epoch=init.producer_epoch,
            partitions=[pb.TxnPartition(topic="orders", partition=0)],
        )
    )
    return init.producer_id, init.producer_epoch


def test_a_prepared_commit_is_completed_by_the_next_leadership(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"

    async def scenario(server: SidecarServer, stub: Any) -> None:
        producer = await _begin(stub)
        coordinator = server.transactions
        assert coordinator is not None
        partitions = coordinator.partitions
        mine = partitions.ownership
        here = {TRANSACTION_STATE_TOPIC: (mine.node_id,)}
        # orders-0 is placed on a broker nobody can reach: its marker cannot be written
        partitions.ownership = dataclasses.replace(
            mine,
            brokers=(*mine.brokers, UNREACHABLE),
            placed={**here, "orders": (UNREACHABLE.node_id,)},
            generation=mine.generation + 1,
        )
        while await _state(stub) is not TransactionState.ONGOING:
            await asyncio.sleep(0.01)  # the new plan's load of the coordinator's partition
        end = asyncio.ensure_future(
            stub.EndTxn(
                pb.EndTxnRequest(
                    transactional_id="t",
                    producer_id=producer[0],
                    producer_epoch=producer[1],
                    committed=True,
                )
            )
        )
        while await _state(stub) is not TransactionState.PREPARE_COMMIT:
            await asyncio.sleep(0.01)  # the coordinator is loading or writing: look again
        # a new leadership of the coordinator's partition, with orders-0 back here
        generation = mine.generation + 2
        partitions.ownership = dataclasses.replace(
            mine, placed={**here, "orders": (mine.node_id,)}, generation=generation
        )
        while await _state(stub) is not TransactionState.COMPLETE_COMMIT:
            await asyncio.sleep(0.01)  # the new leadership completes it: look again
        end.cancel()  # answered NOT_COORDINATOR by the old leadership, or done
        await asyncio.gather(end, return_exceptions=True)
        assert markers(data_dir / "orders-0") == [Marker(True, *producer)]
        segment = next((data_dir / "orders-0").glob("*.log")).read_bytes()
        (header,) = [h for h in iter_batches(segment) if h.is_control]
        assert read_end_txn_marker(segment, header).coordinator_epoch == generation

    _run(tmp_path, scenario)


def test_a_verification_is_asked_once_until_the_partition_moves_on(tmp_path: Path) -> None:
    async def scenario(server: SidecarServer, stub: Any) -> None:
        coordinator = server.transactions
        assert coordinator is not None
        producer_id, epoch = await _begin(stub)
        tp = TopicPartition("orders", 0)
        orders = server.manager.get_log(tp)
        batch = build_batch(
            [SimpleRecord(b"k", b"v", 1)],
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=0,
            is_transactional=True,
        )

        async def verify() -> float:
            await coordinator.verify_append("t", tp, orders, batch)
            return _sample(coordinator.metrics, "tierlog_transaction_verifications_total")

        # Verified but not appended (say its append was refused): a retry is not asked.
        assert [await verify(), await verify()] == [1, 1]
        await coordinator.append(tp, build_batch([SimpleRecord(b"k", b"other", 1)]))
        assert await verify() == 2  # the partition moved on: asked again
        await stub.EndTxn(
            pb.EndTxnRequest(
                transactional_id="t", producer_id=producer_id, producer_epoch=epoch, committed=True
            )
        )
        # The marker ended the transaction there; the next one, at the same epoch, has
        # not added orders-0.
        with pytest.raises(InvalidTxnStateError):
            await verify()

        mine = coordinator.partitions.ownership
        coordinator.partitions.ownership = dataclasses.replace(
            mine,
            brokers=(*mine.brokers, UNREACHABLE),
            placed={TRANSACTION_STATE_TOPIC: (UNREACHABLE.node_id,), "orders": (mine.node_id,)},
            generation=mine.generation + 1,
        )
        with pytest.raises(NotEnoughReplicasError, match="NETWORK_EXCEPTION"):
            await verify()  # asked of the coordinator's broker, out of reach: retriable

        refusals = "tierlog_transaction_verification_refusals_total"
        assert _sample(coordinator.metrics, "tierlog_transaction_verifications_total") == 4
        assert _sample(coordinator.metrics, refusals, reason="INVALID_TXN_STATE") == 1
        assert _sample(coordinator.metrics, refusals, reason="NOT_ENOUGH_REPLICAS") == 1

    _run(tmp_path, scenario)


def _sample(metrics: TransactionMetrics, name: str, **labels: str) -> float:
    """The value of one of the coordinator's series, as a scrape reads it."""
    (value,) = [
        sample.value
        for family in metrics.collect()
        for sample in family.samples
        if sample.name == name and sample.labels == labels
    ]
    return value


async def _state(stub: Any) -> TransactionState:
    try:
        described = await stub.DescribeTransactions(
            pb.DescribeTransactionsRequest(transactional_id="t")
        )
    except grpc.aio.AioRpcError as error:
        if "COORDINATOR_LOAD_IN_PROGRESS" in (error.details() or ""):
            return TransactionState.DEAD  # not known this instant: not the state awaited
        raise
    return next(state for state in TransactionState if state.kafka_name == described.state)
