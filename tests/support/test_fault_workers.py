"""The fault run's tools together, on one real broker (replication is not needed for
what they promise): producer and consumer workers in their own processes record a
history while the broker is paused with SIGSTOP, its link cut and blackholed through the
fault proxy, it is killed with ``kill -9`` and started again, and a producer is killed
mid-run; the broker's data directory is read back as the final log; the checker finds
nothing wrong and every fault is followed by acknowledgements again."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fault_workers import start_worker, wait_for_events
from tests.support.history import (
    Event,
    HistoryRecorder,
    Ok,
    Read,
    Rule,
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


def _create_topic(servers: str) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    try:
        admin.create_topic(TOPIC, PARTITIONS)
    finally:
        admin.close()


def _start_workers(history: Path, servers: str) -> list[subprocess.Popen[bytes]]:
    history.mkdir()
    return [
        start_worker("produce", "producer-1", history, servers, TOPIC, configs=PRODUCER_CONFIGS),
        start_worker("produce", "producer-2", history, servers, TOPIC, configs=PRODUCER_CONFIGS),
        start_worker("consume", "consumer-1", history, servers, TOPIC, PARTITIONS),
    ]


def _stop(workers: list[subprocess.Popen[bytes]]) -> list[int]:
    """SIGTERM to the workers still running; every worker's exit status."""
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    return [worker.wait(timeout=60) for worker in workers]


def _history_with_final_reads(history: Path, sidecar: SidecarProcess) -> list[Event]:
    """The stopped broker's partitions read back from its files as the final reads, and
    the whole history loaded."""
    with HistoryRecorder(history, "final") as final:
        for partition in range(PARTITIONS):
            records = read_values(sidecar.data_dir / f"{TOPIC}-{partition}", upto_offset=2**63)
            log_end = records[-1][0] + 1 if records else 0  # one broker: all committed
            final.final_read("broker-0", partition, log_end, records)
    return load_history(history)


def test_a_fault_run_on_one_broker_records_a_history_that_checks(
    tmp_path: Path, broker_behind_proxy: tuple[SidecarProcess, TcpFaultProxy]
) -> None:
    sidecar, proxy = broker_behind_proxy
    servers = proxy.address("broker-0")
    _create_topic(servers)
    history = tmp_path / "history"
    workers = _start_workers(history, servers)
    try:
        with HistoryRecorder(history, "nemesis") as nemesis:
            wait_for_events(history, workers, 100)
            with paused(sidecar.process.pid):
                nemesis.fault("SIGSTOP", "broker-0")  # once it is in effect
                time.sleep(FAULT_S)
            wait_for_events(history, workers, 100)
            for fault in ("cut", "blackhole"):
                getattr(proxy, fault)("broker-0")
                nemesis.fault(fault, "broker-0")
                time.sleep(FAULT_S)
                proxy.heal("broker-0")
                wait_for_events(history, workers, 100)
            kill_9(sidecar.process.pid)
            nemesis.fault("kill -9", "broker-0")
            sidecar.process.wait()
            sidecar.start()  # on its port, recovering its log
            wait_for_events(history, workers, 100)
            kill_9(workers[1].pid)  # producer-2 dies mid-run: its last sends are unanswered
            nemesis.fault("kill -9", "producer-2")
            workers[1].wait()
            wait_for_events(history, workers[:1] + workers[2:], 100)
    finally:
        exits = _stop(workers)
    assert exits == [0, -signal.SIGKILL, 0]
    assert sidecar.stop() == 0

    events = _history_with_final_reads(history, sidecar)
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


def test_a_wiped_data_dir_is_caught_as_lost_acknowledged_records(
    tmp_path: Path, broker_behind_proxy: tuple[SidecarProcess, TcpFaultProxy]
) -> None:
    """The checker on a real loss: the lone broker is killed, its data dir wiped, and it
    starts empty; what was acknowledged and read before is gone, and the history says so."""
    sidecar, proxy = broker_behind_proxy
    servers = proxy.address("broker-0")
    _create_topic(servers)
    history = tmp_path / "history"
    workers = _start_workers(history, servers)
    try:
        with HistoryRecorder(history, "nemesis") as nemesis:
            wait_for_events(history, workers, 100)
            wait_for_events(history, workers, 1, "read")
            kill_9(sidecar.process.pid)
            sidecar.process.wait()
            shutil.rmtree(sidecar.data_dir)
            nemesis.fault("wiped data dir", "broker-0")
            sidecar.start()
            _create_topic(servers)  # the topic went with the data
            wait_for_events(history, workers, 100)
    finally:
        exits = _stop(workers)
    assert exits == [0, 0, 0]
    assert sidecar.stop() == 0

    violations = check(_history_with_final_reads(history, sidecar))
    found = {violation.rule for violation in violations}
    assert {Rule.ACKNOWLEDGED_KEPT, Rule.READS_KEPT} <= found, found
