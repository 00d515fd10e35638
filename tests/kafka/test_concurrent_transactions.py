"""CONCURRENT_TRANSACTIONS over the Kafka listener, in a real sidecar server whose
ownership plan the test changes (as tests/coordinator/test_transaction_coordinator.py):
a commit whose partition's owner is unreachable stays prepared while its marker is
retried, and meanwhile every call for its transactional id, on another connection, is
answered CONCURRENT_TRANSACTIONS, which clients retry; once the partition is back the
commit completes."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import grpc
from kio.schema.errors import ErrorCode

from tests.kafka.test_transactions import (
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    INIT_PRODUCER_ID,
    TIMEOUT_MS,
)
from tests.kafka.wire import KafkaWire
from tierlog.api.v1 import admin_service_pb2, admin_service_pb2_grpc
from tierlog.broker.ownership import Broker
from tierlog.coordinator.transaction_records import TransactionState
from tierlog.coordinator.transaction_topic import TRANSACTION_STATE_TOPIC
from tierlog.sidecar.config import SidecarConfig
from tierlog.sidecar.server import SidecarServer
from tierlog.storage.errors import TierlogError

UNREACHABLE = Broker(9, "127.0.0.1:1")
TID = "t"


async def _create_topic(server: SidecarServer) -> None:
    async with grpc.aio.insecure_channel(server.address) as channel:
        await admin_service_pb2_grpc.AdminServiceStub(channel).CreateTopics(
            admin_service_pb2.CreateTopicsRequest(
                topics=[admin_service_pb2.NewTopic(name="orders", num_partitions=1)]
            )
        )


def _init(wire: KafkaWire) -> Any:
    return wire.call(
        INIT_PRODUCER_ID,
        4,
        {"transactional_id": TID, "transaction_timeout": TIMEOUT_MS},
    )


def _add(wire: KafkaWire, pid: int) -> ErrorCode:
    body = wire.call(
        ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": TID,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": "orders", "partitions": [0]}],
        },
    )
    return ErrorCode(
        body.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    )


def _end(wire: KafkaWire, pid: int) -> ErrorCode:
    body = wire.call(
        END_TXN,
        3,
        {"transactional_id": TID, "producer_id": pid, "producer_epoch": 0, "committed": True},
    )
    return ErrorCode(body.error_code)


def test_calls_meeting_a_transaction_being_completed_are_concurrent_transactions(
    tmp_path: Path,
) -> None:
    config = SidecarConfig.from_properties(
        {
            "log.dirs": str(tmp_path / "data"),
            "listeners": "127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "transaction.state.log.num.partitions": "1",
        }
    )

    async def run() -> None:
        server = SidecarServer(config)
        await server.start()
        try:
            await asyncio.wait_for(scenario(server), timeout=60)
        finally:
            await server.stop()

    async def state(server: SidecarServer) -> TransactionState | None:
        assert server.transactions is not None
        try:
            return server.transactions.describe(TID).state
        except TierlogError:  # loading, or the id not written yet: look again
            return None

    async def scenario(server: SidecarServer) -> None:
        assert server.kafka is not None and server.transactions is not None
        port = int(server.kafka.address.rpartition(":")[2])
        partitions = server.transactions.partitions
        ender, other = KafkaWire(port), KafkaWire(port)
        try:
            await _create_topic(server)
            init = await asyncio.to_thread(_init, other)
            while init.error_code == ErrorCode.coordinator_load_in_progress:
                await asyncio.sleep(0.01)  # the first call made the topic: it loads
                init = await asyncio.to_thread(_init, other)
            pid = init.producer_id
            assert await asyncio.to_thread(_add, other, pid) == ErrorCode.none
            mine = partitions.ownership
            here = {TRANSACTION_STATE_TOPIC: (mine.node_id,)}
            # orders-0 is placed on a broker nobody can reach: its marker cannot be written
            partitions.ownership = dataclasses.replace(
                mine,
                brokers=(*mine.brokers, UNREACHABLE),
                placed={**here, "orders": (UNREACHABLE.node_id,)},
                generation=mine.generation + 1,
            )
            while await state(server) is not TransactionState.ONGOING:
                await asyncio.sleep(0.01)  # the new plan's load of the coordinator's partition
            ending = asyncio.ensure_future(asyncio.to_thread(_end, ender, pid))
            while await state(server) is not TransactionState.PREPARE_COMMIT:
                await asyncio.sleep(0.01)  # the coordinator is writing PrepareCommit

            answers = [
                (await asyncio.to_thread(_init, other)).error_code,
                await asyncio.to_thread(_add, other, pid),
                await asyncio.to_thread(_end, other, pid),
            ]

            partitions.ownership = dataclasses.replace(
                mine, placed={**here, "orders": (mine.node_id,)}, generation=mine.generation + 2
            )
            while await state(server) is not TransactionState.COMPLETE_COMMIT:
                await asyncio.sleep(0.01)  # the next leadership completes it
            await ending  # answered by the old leadership (NOT_COORDINATOR) or done
            assert answers == [ErrorCode.concurrent_transactions] * 3
        finally:
            ender.close()
            other.close()

    asyncio.run(run())
