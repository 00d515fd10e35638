"""Backpressure: the call and produce-byte budgets, in a loop and against a real process."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.scrape import METRICS, scrape_sidecar
from tierlog.api.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    log_service_pb2,
    log_service_pb2_grpc,
)
from tierlog.sidecar.config import SidecarConfig
from tierlog.sidecar.limits import Budget
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.records import SimpleRecord, build_batch

from .conftest import SidecarFactory, reason_of

# -- the budget -----------------------------------------------------------------------


def test_the_budget_grants_in_arrival_order_and_gives_up_at_the_timeout() -> None:
    async def scenario() -> None:
        budget = Budget(10)
        assert await budget.acquire(6, 0) == 6
        order: list[str] = []

        async def wait(name: str, amount: int, timeout_s: float) -> int | None:
            granted = await budget.acquire(amount, timeout_s)
            order.append(name)
            return granted

        first = asyncio.create_task(wait("first", 5, 5))
        second = asyncio.create_task(wait("second", 1, 5))  # would fit, but waits its turn
        await asyncio.sleep(0.01)
        assert (budget.used, budget.waiting) == (6, 6)
        assert await budget.acquire(5, 0.05) is None  # the line is full: refused at once
        budget.release(6)
        assert await first == 5 and await second == 1
        assert order == ["first", "second"]
        assert await budget.acquire(9, 0.05) is None  # timed out waiting
        assert (budget.used, budget.waiting) == (6, 0)
        assert await budget.acquire(4, 0) == 4

    asyncio.run(scenario())


def test_a_request_larger_than_the_budget_waits_for_all_of_it() -> None:
    async def scenario() -> None:
        budget = Budget(10)
        assert await budget.acquire(3, 0) == 3
        big = asyncio.create_task(budget.acquire(50, 5))
        await asyncio.sleep(0.01)
        assert not big.done()
        budget.release(3)
        assert await big == 10
        budget.release(10)
        assert budget.used == 0

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_the_line_and_frees_its_turn() -> None:
    async def scenario() -> None:
        budget = Budget(10)
        await budget.acquire(10, 0)
        cancelled = asyncio.create_task(budget.acquire(8, 5))
        later = asyncio.create_task(budget.acquire(2, 5))
        await asyncio.sleep(0.01)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        budget.release(2)
        assert await later == 2
        assert (budget.used, budget.waiting) == (10, 0)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "setting",
    ["queued.max.requests=0", "queued.max.request.bytes=0", "tierlog.queued.max.wait.ms=-1"],
)
def test_bad_limits_stop_the_start(tmp_path: Path, setting: str) -> None:
    key, _, value = setting.partition("=")
    with pytest.raises(InvalidConfigError, match=key):
        SidecarConfig.from_properties({"log.dirs": str(tmp_path), key: value})


# -- a real sidecar -------------------------------------------------------------------


def test_a_produce_flood_beyond_the_byte_budget_is_refused_and_memory_stays_bounded(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    mib = 1024 * 1024
    sidecar = sidecar_factory(
        tmp_path / "data",
        METRICS,
        f"queued.max.request.bytes={2 * mib}",
        "tierlog.queued.max.wait.ms=20",
        "log.flush.interval.messages=1",  # every batch fsynced: the disk is the bottleneck
        "log.retention.bytes=67108864",
        "log.segment.bytes=16777216",
        "log.retention.check.interval.ms=500",
    )
    sidecar.create_topic("flood")
    batch = build_batch([SimpleRecord(None, b"x" * (mib // 2 - 200), 1_000, ())])
    request = log_service_pb2.ProduceRequest(topic="flood", record_batches=batch)
    baseline_rss = sidecar.rss_bytes()
    peak_rss = baseline_rss
    flooding = threading.Event()

    def sample() -> None:
        nonlocal peak_rss
        while flooding.is_set():
            peak_rss = max(peak_rss, sidecar.rss_bytes())
            time.sleep(0.02)

    outcomes: Counter[str] = Counter()

    def produce(_: int) -> str:
        try:
            sidecar.log.Produce(request, timeout=30)
        except grpc.RpcError as error:
            return reason_of(error)
        return "OK"

    flooding.set()
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(48) as pool:
            outcomes.update(pool.map(produce, range(600)))  # 300 MiB from 48 producers
    finally:
        flooding.clear()
        sampler.join()

    assert set(outcomes) <= {"OK", "THROTTLING_QUOTA_EXCEEDED"}, outcomes
    assert outcomes["THROTTLING_QUOTA_EXCEEDED"] > 0 and outcomes["OK"] > 0, outcomes
    assert peak_rss - baseline_rss < 200 * mib, (baseline_rss, peak_rss)
    sidecar.assert_alive()
    health: Any = health_pb2_grpc.HealthStub(sidecar.channel)  # typeshed: no methods
    status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
    assert status == health_pb2.HealthCheckResponse.SERVING
    answer = sidecar.log.Produce(request, timeout=10)  # the flood over, room again
    assert answer.last_offset == outcomes["OK"]

    found = scrape_sidecar(sidecar)
    produce_call = {"grpc_service": "LogService", "method": "Produce"}
    refused = outcomes["THROTTLING_QUOTA_EXCEEDED"]
    assert (
        found.value("tierlog_errors_total", **produce_call, reason="THROTTLING_QUOTA_EXCEEDED")
        == refused
    )
    assert found.value("tierlog_requests_total", **produce_call, code="RESOURCE_EXHAUSTED") == (
        refused
    )
    assert found.value("tierlog_produce_bytes_in_flight") == 0
    assert found.value("tierlog_produce_bytes_waiting") == 0


def _connection(address: str) -> grpc.Channel:
    """A channel on a connection of its own (gRPC may otherwise share one between
    channels alike): what the broker sees as one client."""
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def _long_poll(topic: str) -> log_service_pb2.FetchRequest:
    """A Fetch that holds its call slot: nothing comes for 30 s."""
    return log_service_pb2.FetchRequest(topic=topic, offset=0, max_wait_ms=30_000)


def test_calls_beyond_queued_max_requests_wait_then_are_refused(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(
        tmp_path / "data", "queued.max.requests=2", "tierlog.queued.max.wait.ms=300"
    )
    sidecar.create_topic("busy")
    holders = [sidecar.log.Fetch.future(_long_poll("busy"), timeout=60) for _ in range(2)]
    fetch = log_service_pb2.FetchRequest(topic="busy", offset=0)
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as refused:
        sidecar.log.Fetch(fetch, timeout=10)
    assert time.monotonic() - started >= 0.25  # it waited tierlog.queued.max.wait.ms
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert reason_of(refused.value) == "THROTTLING_QUOTA_EXCEEDED"
    assert not any(holder.done() for holder in holders)

    health: Any = health_pb2_grpc.HealthStub(sidecar.channel)  # exempt: probes still answer
    status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
    assert status == health_pb2.HealthCheckResponse.SERVING

    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as expired:  # a deadline shorter than the wait ends it
        sidecar.log.Fetch(fetch, timeout=0.1)
    assert time.monotonic() - started < 0.25
    assert expired.value.code() in (
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,  # the server gave up at the deadline, first
    )

    with ThreadPoolExecutor(1) as pool:  # a slot freed while a call waits: it goes through
        waiting = pool.submit(sidecar.log.Fetch, fetch, timeout=10)
        time.sleep(0.1)
        holders[0].cancel()
        assert waiting.result(timeout=10).high_watermark == 0
    holders[1].cancel()
    sidecar.assert_alive()


def test_abandoned_streams_do_not_hold_up_other_clients_calls(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    """Streams once counted against queued.max.requests (500): 500 Subscribe calls left
    open by a client that stopped reading them made every other call wait, then fail."""
    sidecar = sidecar_factory(tmp_path / "data")
    sidecar.create_topic("tails")
    batch = build_batch([SimpleRecord(None, b"x", 1_000, ())])
    sidecar.log.Produce(log_service_pb2.ProduceRequest(topic="tails", record_batches=batch))
    with _connection(sidecar.address) as abandoning:
        stub = log_service_pb2_grpc.LogServiceStub(abandoning)
        request = log_service_pb2.SubscribeRequest(topic="tails", offset=-2)
        streams = [stub.Subscribe(request) for _ in range(500)]
        for stream in streams:  # each admitted and answering; then nobody reads them
            assert next(stream).high_watermark == 1
        with _connection(sidecar.address) as other:
            produced = log_service_pb2_grpc.LogServiceStub(other).Produce(
                log_service_pb2.ProduceRequest(topic="tails", record_batches=batch), timeout=10
            )
            topics = admin_service_pb2_grpc.AdminServiceStub(other).ListTopics(
                admin_service_pb2.ListTopicsRequest(), timeout=10
            )
        assert produced.base_offset == 1
        assert [topic.name for topic in topics.topics] == ["tails"]
        for stream in streams:
            stream.cancel()
    sidecar.assert_alive()


def test_one_connection_cannot_take_every_call_slot(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    """As Kafka serves a connection's requests one at a time, a client's share of
    queued.max.requests is bounded: its long polls leave room for the others' calls."""
    sidecar = sidecar_factory(
        tmp_path / "data",
        "tierlog.queued.max.requests.per.connection=4",
        "tierlog.queued.max.wait.ms=300",
    )
    sidecar.create_topic("polls")
    with _connection(sidecar.address) as greedy, _connection(sidecar.address) as other:
        stub = log_service_pb2_grpc.LogServiceStub(greedy)
        polls = [stub.Fetch.future(_long_poll("polls"), timeout=60) for _ in range(5)]
        refused = [poll for poll in polls if _refused_within(poll, 10)]
        assert len(refused) == 1  # one beyond the connection's four waited, then was refused
        error = refused[0].exception()
        assert isinstance(error, grpc.RpcError)
        assert reason_of(error) == "THROTTLING_QUOTA_EXCEEDED"
        answer = log_service_pb2_grpc.LogServiceStub(other).Fetch(
            log_service_pb2.FetchRequest(topic="polls", offset=0), timeout=10
        )
        assert answer.high_watermark == 0
        for poll in polls:
            poll.cancel()


def _refused_within(call: Any, timeout_s: float) -> bool:
    """Whether ``call`` failed within ``timeout_s`` (a long poll still waiting did not)."""
    try:
        call.result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        return False
    except grpc.RpcError:
        return True
    return False


def test_streams_have_a_bound_of_their_own_and_one_per_connection(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(
        tmp_path / "data",
        "tierlog.max.streams=5",
        "tierlog.max.streams.per.connection=3",
        "tierlog.queued.max.wait.ms=300",
    )
    sidecar.create_topic("tails")
    request = log_service_pb2.SubscribeRequest(topic="tails", offset=-1, max_wait_ms=100)
    with (
        _connection(sidecar.address) as first,
        _connection(sidecar.address) as second,
        _connection(sidecar.address) as third,
    ):
        held = []
        for channel, count in ((first, 3), (second, 2)):
            stub = log_service_pb2_grpc.LogServiceStub(channel)
            for _ in range(count):
                held.append(stub.Subscribe(request))
                next(held[-1])  # admitted: its first (quiet) message came
        for channel in (first, third):  # the connection's bound, then the broker's
            beyond = log_service_pb2_grpc.LogServiceStub(channel).Subscribe(request)
            with pytest.raises(grpc.RpcError) as refused:
                next(beyond)
            assert reason_of(refused.value) == "THROTTLING_QUOTA_EXCEEDED"
        answer = log_service_pb2_grpc.LogServiceStub(third).Fetch(  # calls are not streams
            log_service_pb2.FetchRequest(topic="tails", offset=0), timeout=10
        )
        assert answer.high_watermark == 0
        held.pop().cancel()  # a stream ends: room for another
        assert next(log_service_pb2_grpc.LogServiceStub(third).Subscribe(request)) is not None
        for stream in held:
            stream.cancel()


@pytest.mark.parametrize(
    "setting",
    [
        "tierlog.max.streams=0",
        "tierlog.max.streams.per.connection=0",
        "tierlog.queued.max.requests.per.connection=0",
    ],
)
def test_bad_stream_and_connection_limits_stop_the_start(tmp_path: Path, setting: str) -> None:
    key, _, value = setting.partition("=")
    with pytest.raises(InvalidConfigError, match=key):
        SidecarConfig.from_properties({"log.dirs": str(tmp_path), key: value})
