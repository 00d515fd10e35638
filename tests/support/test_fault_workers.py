"""The fault run's tools together, on one real broker (replication is not needed for
what they promise): producer and consumer workers in their own processes record a
history while the broker is paused with SIGSTOP, its link cut and blackholed through the
fault proxy, it is killed with ``kill -9`` and started again, and a producer is killed
mid-run; the broker's data directory is read back as the final log; the checker finds
nothing wrong and every fault is followed by acknowledgements again."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fault_workers import start_worker, wait_for_acknowledgements
from tests.support.history import (
    HistoryRecorder,
    Ok,
    Read,
    availability,
    check,
    load_history,
)
from tests.support.process_faults import kill_9, paused
from tests.support.replica_dirs import read_values
from tests.support.sidecars import SidecarProcess, free_port, start_sidecar
from tests.support.tcp_fault_proxy import TcpFaultProxy
from tierlog.client import AdminClient

pytestmark = pytest.mark.slow

TOPIC, PARTITIONS = "history", 2
# The length of each fault: what the run measures the recovery from, not a wait for a
# condition.
FAULT_S = 1.0
# Acknowledgements again within this of each fault (its length, a request timeout and
# the client's reconnect backoff, with room for a busy machine).
AVAILABILITY_BOUND_S = 20.0
PRODUCER_CONFIGS = ("request.timeout.ms=1500", "delivery.timeout.ms=120000", "linger.ms=5")


@pytest.fixture
def broker_behind_proxy(tmp_path: Path) -> Iterator[tuple[SidecarProcess, TcpFaultProxy]]:
    """A broker that tells clients to reach it through the proxy."""
    broker_port = free_port()
    with TcpFaultProxy.start({"broker-0": f"127.0.0.1:{broker_port}"}) as proxy:
        sidecar = start_sidecar(
            tmp_path / "broker-0",
            f"advertised.listeners={proxy.address('broker-0')}",
            port=broker_port,
        )
        try:
            yield sidecar, proxy
        finally:
            if sidecar.process.poll() is None:
                sidecar.kill()


def test_a_fault_run_on_one_broker_records_a_history_that_checks(
    tmp_path: Path, broker_behind_proxy: tuple[SidecarProcess, TcpFaultProxy]
) -> None:
    sidecar, proxy = broker_behind_proxy
    servers = proxy.address("broker-0")
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topic(TOPIC, PARTITIONS)
    admin.close()
    history = tmp_path / "history"
    history.mkdir()
    workers = [
        start_worker("produce", "producer-1", history, servers, TOPIC, configs=PRODUCER_CONFIGS),
        start_worker("produce", "producer-2", history, servers, TOPIC, configs=PRODUCER_CONFIGS),
        start_worker("consume", "consumer-1", history, servers, TOPIC, PARTITIONS),
    ]
    try:
        with HistoryRecorder(history, "nemesis") as nemesis:
            wait_for_acknowledgements(history, workers, 100)
            with paused(sidecar.process.pid):
                nemesis.fault("SIGSTOP", "broker-0")  # once it is in effect
                time.sleep(FAULT_S)
            wait_for_acknowledgements(history, workers, 100)
            for fault in ("cut", "blackhole"):
                getattr(proxy, fault)("broker-0")
                nemesis.fault(fault, "broker-0")
                time.sleep(FAULT_S)
                proxy.heal("broker-0")
                wait_for_acknowledgements(history, workers, 100)
            kill_9(sidecar.process.pid)
            nemesis.fault("kill -9", "broker-0")
            sidecar.process.wait()
            sidecar.start()  # on its port, recovering its log
            wait_for_acknowledgements(history, workers, 100)
            kill_9(workers[1].pid)  # producer-2 dies mid-run: its last sends are unanswered
            nemesis.fault("kill -9", "producer-2")
            workers[1].wait()
            wait_for_acknowledgements(history, workers[:1] + workers[2:], 100)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        exits = [worker.wait(timeout=60) for worker in workers]
    assert exits == [0, -signal.SIGKILL, 0]
    assert sidecar.stop() == 0

    with HistoryRecorder(history, "final") as final:
        for partition in range(PARTITIONS):
            records = read_values(sidecar.data_dir / f"{TOPIC}-{partition}", upto_offset=2**63)
            log_end = records[-1][0] + 1 if records else 0
            final.final_read("broker-0", partition, log_end, records)
    events = load_history(history)
    violations = check(events)
    assert not violations, "\n".join(map(str, violations))
    acknowledged = sum(isinstance(event, Ok) for event in events)
    reads = sum(isinstance(event, Read) for event in events)
    assert reads > 0, "the consumer read nothing: rule (b) was not exercised"
    outages = availability(events)
    assert [outage.fault.kind for outage in outages] == [
        "SIGSTOP",
        "cut",
        "blackhole",
        "kill -9",
        "kill -9",
    ]
    seconds = [outage.seconds for outage in outages]
    assert all(s is not None and s < AVAILABILITY_BOUND_S for s in seconds), seconds
    print(f"\n{acknowledged} acknowledged, {reads} read; back after each fault in {seconds} s")
