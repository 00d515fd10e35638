"""``AIOConsumer`` against a real sidecar: its calls leave the event loop free, a
cancelled ``poll`` skips no record, and groups commit through it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from tierlog.client import AIOConsumer, OffsetAndMetadata, Producer, TopicPartition

from .conftest import create_topic
from .sidecars import LiveSidecar

TP = TopicPartition("requests", 0)


def _aio_consumer(sidecar: LiveSidecar, **props: object) -> AIOConsumer:
    config: dict[str, object] = {
        "bootstrap.servers": sidecar.address,
        "auto.offset.reset": "earliest",
    }
    config.update({key.replace("_", "."): value for key, value in props.items()})
    return AIOConsumer(config)


def test_a_poll_awaited_leaves_the_loop_free_to_produce_what_it_waits_for(
    sidecar: LiveSidecar,
) -> None:
    create_topic(sidecar.address, TP.topic)

    async def scenario(producer: Producer) -> list[int]:
        async with _aio_consumer(sidecar) as consumer:
            await consumer.assign([TP])
            waiting = asyncio.create_task(consumer.poll(30_000))
            # Sent from the same loop while the poll waits: a poll that blocked the loop
            # would wait its 30 s out with nothing.
            await producer.send(TP.topic, b"hello", partition=0)
            return [record.offset for record in await waiting]

    with Producer({"bootstrap.servers": sidecar.address}) as producer:
        assert asyncio.run(scenario(producer)) == [0]


def test_a_cancelled_poll_skips_no_record(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, TP.topic)

    async def scenario(producer: Producer) -> list[int]:
        async with _aio_consumer(sidecar) as consumer:
            await consumer.assign([TP])
            waiting = asyncio.create_task(consumer.poll(30_000))
            await asyncio.sleep(0)  # the task hands its poll to the worker thread
            producer.send(TP.topic, b"taken, never received", partition=0).result(10)
            # Blocking here keeps the loop from handing the poll's answer to the task,
            # so the task is cancelled after the worker's poll took the record.
            _wait_until(lambda: consumer.metrics()["records-consumed-total"] == 1)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            again = await consumer.poll(10_000)
            assert consumer.metrics()["records-consumed-total"] == 2  # taken twice
            return [record.offset for record in again]

    with Producer({"bootstrap.servers": sidecar.address}) as producer:
        assert asyncio.run(scenario(producer)) == [0]


def test_a_group_member_iterates_and_commits(sidecar: LiveSidecar) -> None:
    create_topic(sidecar.address, TP.topic)
    with Producer({"bootstrap.servers": sidecar.address}) as producer:
        for n in range(5):
            producer.send(TP.topic, b"%d" % n, partition=0)

    assigned: list[TopicPartition] = []

    async def scenario() -> tuple[list[bytes | None], int, OffsetAndMetadata | None]:
        async with _aio_consumer(sidecar, group_id="handlers") as consumer:
            await consumer.subscribe(TP.topic, on_assign=assigned.extend)  # joins the group
            values = []
            async for record in consumer:
                values.append(record.value)
                if len(values) == 5:
                    break
            await consumer.commit()
            position = await consumer.position(TP)
            return values, position, (await consumer.committed([TP]))[TP]

    values, position, committed = asyncio.run(scenario())
    assert assigned == [TP]
    assert values == [b"0", b"1", b"2", b"3", b"4"]
    assert position == 5
    assert committed is not None and committed.offset == 5


def _wait_until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "never came true"
        time.sleep(0.01)
