"""``tierlog cluster up|status|down``: real brokers started by the installed command, which
exits while they keep serving; records produced through the server list it prints."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.local_cluster import tierlog_cluster as tierlog
from tierlog.cli.local_cluster import (
    CLUSTER_FILE,
    BrokerRecord,
    ClusterRecord,
    ClusterRunningError,
    is_running,
    read_cluster,
    start_cluster,
    stop_cluster,
)
from tierlog.cli.local_sidecar import LocalSidecar, http_get
from tierlog.client import AdminClient, Consumer, ConsumerRecord, Producer

from .conftest import console_script
from .stopping import FAULTHANDLER_ENV, PROMPT_S, STOPS, stopped

TOPIC = "spread"
PARTITIONS = 6
RECORDS = 120


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaped is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def sidecars_on(directory: Path) -> list[int]:
    """Pids of every live ``tierlog-sidecar`` whose command line names ``directory``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
            if "tierlog-sidecar" in command and str(directory) in command:
                pids.append(int(entry.name))
    return [pid for pid in pids if alive(pid)]


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    """The cluster's DIR; whatever still runs on it when the test ends is killed."""
    directory = tmp_path / "cluster"
    try:
        yield directory
    finally:
        for pid in sidecars_on(directory):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def recorded(directory: Path) -> list[dict[str, object]]:
    brokers: list[dict[str, object]] = json.loads((directory / "cluster.json").read_text())[
        "brokers"
    ]
    return brokers


def up(directory: Path, *args: str) -> str:
    result = tierlog("up", "--dir", str(directory), *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def consume_all(servers: str, expected: int, timeout_s: float = 30) -> list[ConsumerRecord]:
    config = {"bootstrap.servers": servers, "auto.offset.reset": "earliest"}
    with Consumer(config) as consumer:
        consumer.subscribe(TOPIC)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + timeout_s
        while len(records) < expected and time.monotonic() < deadline:
            records += consumer.poll(500)
        records += consumer.poll(200)  # nothing more must come
        return records


def _leaders(status: str) -> set[int]:
    return {
        int(line.split("Leader: ")[1].split()[0])
        for line in status.splitlines()
        if f"Topic: {TOPIC}\tPartition:" in line
    }


def test_up_produce_status_kill_down_and_up_again_keeps_the_data(cluster_dir: Path) -> None:
    servers = up(cluster_dir, "--brokers", "3", "--config", "broker.session.timeout.ms=2000")

    brokers = recorded(cluster_dir)
    assert servers == ",".join(str(broker["address"]) for broker in brokers)
    assert [broker["node_id"] for broker in brokers] == [0, 1, 2]
    pids = [int(str(broker["pid"])) for broker in brokers]
    assert all(alive(pid) for pid in pids)  # the command exited; its brokers serve on
    for broker in brokers:
        assert (Path(str(broker["data_dir"])) / "tierlog-sidecar.log").exists()

    with AdminClient(servers.split(",")[2]) as admin:  # any broker: the store tells all
        admin.create_topic(TOPIC, PARTITIONS)
    for address in servers.split(","):  # each learns it at its next read of the store
        with AdminClient(address) as admin:
            deadline = time.monotonic() + 30
            while TOPIC not in admin.list_topics():
                assert time.monotonic() < deadline, f"{address} never learnt {TOPIC}"
                time.sleep(0.05)
    with Producer({"bootstrap.servers": servers, "linger.ms": 0}) as producer:
        futures = [
            producer.send(TOPIC, b"v%d" % n, key=b"k%d" % n, partition=n % PARTITIONS)
            for n in range(RECORDS)
        ]
        acknowledged = [future.result(timeout=30) for future in futures]
    assert Counter(ack.partition for ack in acknowledged) == dict.fromkeys(
        range(PARTITIONS), RECORDS // PARTITIONS
    )
    consumed = consume_all(servers, RECORDS)
    assert sorted(record.value or b"" for record in consumed) == sorted(
        b"v%d" % n for n in range(RECORDS)
    )

    status = tierlog("status", "--dir", str(cluster_dir))
    assert status.returncode == 0, status.stderr
    assert "3 of 3 brokers ready" in status.stdout
    assert f"Topic: {TOPIC}\tPartitionCount: {PARTITIONS}\tReplicationFactor: 3" in status.stdout
    assert _leaders(status.stdout) == {0, 1, 2}  # the partitions' leaders spread
    assert status.stdout.count(f"HighWatermark: {RECORDS // PARTITIONS}\t") == PARTITIONS

    os.kill(pids[1], signal.SIGKILL)
    while alive(pids[1]):  # gone once the kernel has torn it down
        time.sleep(0.01)
    status = tierlog("status", "--dir", str(cluster_dir))
    assert status.returncode == 1
    assert "broker(s) 1 down" in status.stderr
    assert f"pid {pids[1]} NOT RUNNING" in status.stdout
    assert "2 of 3 brokers ready" in status.stdout
    # One lease (2 s) later the controller has moved broker 1's leaderships to the
    # others, and every record is still there to read.
    deadline = time.monotonic() + 60
    while 1 in _leaders(status.stdout) or "offline" in status.stdout:
        assert time.monotonic() < deadline, status.stdout
        status = tierlog("status", "--dir", str(cluster_dir))
    assert _leaders(status.stdout) <= {0, 2}
    again = consume_all(servers, RECORDS)
    assert sorted((r.partition, r.offset, r.value) for r in again) == sorted(
        (r.partition, r.offset, r.value) for r in consumed
    )

    down = tierlog("down", "--dir", str(cluster_dir))
    assert down.returncode == 0, down.stderr
    assert not [pid for pid in pids if alive(pid)]
    assert not sidecars_on(cluster_dir)
    assert not (cluster_dir / "cluster.json").exists()
    assert tierlog("down", "--dir", str(cluster_dir)).returncode == 0  # stopping twice

    servers = up(cluster_dir, "--brokers", "3")
    again = consume_all(servers, RECORDS)
    assert sorted((r.partition, r.offset, r.value) for r in again) == sorted(
        (r.partition, r.offset, r.value) for r in consumed
    )
    assert tierlog("down", "--dir", str(cluster_dir), "--delete-data").returncode == 0
    assert not list(cluster_dir.glob("broker-*"))


def test_up_on_a_running_cluster_is_refused_and_leaves_it_running(cluster_dir: Path) -> None:
    servers = up(cluster_dir, "--brokers", "1")
    before = recorded(cluster_dir)

    again = tierlog("up", "--dir", str(cluster_dir), "--brokers", "1")

    assert again.returncode == 1
    assert "CLUSTER_ALREADY_RUNNING" in again.stderr
    assert f"pid {before[0]['pid']}" in again.stderr
    assert recorded(cluster_dir) == before
    assert sidecars_on(cluster_dir) == [before[0]["pid"]]
    with AdminClient(servers) as admin:
        assert admin.list_topics() == {}


def test_two_ups_at_once_start_one_cluster(
    cluster_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each up, once it found no cluster running, waits (up to 2 s) for the other to find
    # the same before it starts a broker: two ups that could both pass the check do.
    both_checked = threading.Barrier(2)
    real_spawn = LocalSidecar.spawn

    def spawn_after_the_rival(data_dir: Path, *args: Any, **kwargs: Any) -> LocalSidecar:
        if data_dir.name == "broker-0":
            with contextlib.suppress(threading.BrokenBarrierError):
                both_checked.wait(timeout=2)
        return real_spawn(data_dir, *args, **kwargs)

    monkeypatch.setattr(LocalSidecar, "spawn", staticmethod(spawn_after_the_rival))
    outcomes: list[ClusterRecord | Exception] = []

    def start() -> None:
        try:
            outcomes.append(start_cluster(cluster_dir, 2))
        except Exception as error:
            outcomes.append(error)

    ups = [threading.Thread(target=start) for _ in range(2)]
    for up_thread in ups:
        up_thread.start()
    for up_thread in ups:
        up_thread.join()

    (started,) = [outcome for outcome in outcomes if isinstance(outcome, ClusterRecord)]
    (refused,) = [outcome for outcome in outcomes if isinstance(outcome, Exception)]
    assert isinstance(refused, ClusterRunningError), refused
    assert read_cluster(cluster_dir) == started
    assert sorted(sidecars_on(cluster_dir)) == sorted(b.pid or 0 for b in started.brokers)


def test_a_stale_record_of_dead_brokers_does_not_stop_up(cluster_dir: Path) -> None:
    up(cluster_dir, "--brokers", "2")
    for broker in recorded(cluster_dir):
        os.kill(int(str(broker["pid"])), signal.SIGKILL)

    servers = up(cluster_dir, "--brokers", "2")

    assert len(servers.split(",")) == 2
    assert len(sidecars_on(cluster_dir)) == 2


def test_brokers_of_an_up_killed_while_they_start_are_found_by_down(cluster_dir: Path) -> None:
    starting = subprocess.Popen(
        [console_script("tierlog"), "cluster", "up", "--dir", str(cluster_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not (cluster_dir / "cluster.json").exists() and starting.poll() is None:
            time.sleep(0.005)
        starting.kill()
    finally:
        starting.wait()
    assert starting.returncode == -signal.SIGKILL  # killed before it could finish
    brokers = recorded(cluster_dir)
    # Killed while it waited for them: a sidecar takes a second or so to serve.
    readiness = [http_get(str(broker["metrics_address"]), "/readyz")[0] for broker in brokers]
    assert readiness != [200] * len(brokers)
    pids = [int(str(broker["pid"])) for broker in brokers]
    assert sorted(pids) == sorted(sidecars_on(cluster_dir))

    down = tierlog("down", "--dir", str(cluster_dir))

    assert down.returncode == 0, down.stderr
    assert not sidecars_on(cluster_dir)


@STOPS
def test_an_up_stopped_while_they_start_stops_them(
    cluster_dir: Path, stop: signal.Signals, status: int
) -> None:
    starting = subprocess.Popen(
        [console_script("tierlog"), "cluster", "up", "--dir", str(cluster_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=FAULTHANDLER_ENV,
    )
    try:
        while not (cluster_dir / "cluster.json").exists() and starting.poll() is None:
            time.sleep(0.005)
        brokers = recorded(cluster_dir)
        readiness = [http_get(str(b["metrics_address"]), "/readyz")[0] for b in brokers]
        elapsed_s, stdout, stderr = stopped(starting, stop)
    finally:
        starting.kill()
    assert readiness != [200] * len(brokers)  # it was still waiting for them
    assert starting.returncode == status, stderr
    assert elapsed_s < PROMPT_S  # at its next look at the brokers, not once they are ready
    assert stdout == ""
    assert not sidecars_on(cluster_dir)
    assert not (cluster_dir / "cluster.json").exists()


def test_down_kills_a_broker_that_does_not_stop_within_the_grace(cluster_dir: Path) -> None:
    up(cluster_dir, "--brokers", "2")
    pids = [int(str(broker["pid"])) for broker in recorded(cluster_dir)]
    os.kill(pids[0], signal.SIGSTOP)  # a stopped process leaves SIGTERM pending

    down = tierlog("down", "--dir", str(cluster_dir), "--grace", "1")

    assert down.returncode == 0, down.stderr
    assert f"broker 0 (pid {pids[0]}) outlived 1 s: SIGKILL" in down.stderr
    assert "broker 1" not in down.stderr  # it stopped on SIGTERM
    assert not [pid for pid in pids if alive(pid)]


# A broker stand-in that, on SIGTERM, puts itself in the state an exiting process passes
# through: the kernel frees a process's memory, and with it /proc/PID/cmdline, before it
# closes its files and ports. Blanking its own arguments (``/proc/self/mem`` at the
# ``arg_start``..``arg_end`` of /proc/self/stat) gets there on purpose, for the seconds
# its third argument gives.
_BLANKS_ITS_COMMAND_LINE_ON_SIGTERM = """
import signal, sys, time
from pathlib import Path

def blank_then_linger(signum, frame):
    fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
    start, end = int(fields[45]), int(fields[46])
    with open("/proc/self/mem", "r+b", buffering=0) as memory:
        memory.seek(start)
        memory.write(bytes(end - start))
    time.sleep(float(sys.argv[3]))
    sys.exit(0)

signal.signal(signal.SIGTERM, blank_then_linger)
print("ready", flush=True)
signal.pause()
"""


def test_down_waits_for_a_broker_that_lost_its_command_line_until_it_has_ended(
    cluster_dir: Path,
) -> None:
    data_dir = cluster_dir / "broker-0"
    data_dir.mkdir(parents=True)
    linger_s = 1.0
    stand_in = [sys.executable, "-c", _BLANKS_ITS_COMMAND_LINE_ON_SIGTERM]
    broker = subprocess.Popen(
        [*stand_in, "tierlog-sidecar", str(data_dir), str(linger_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert broker.stdout is not None and broker.stdout.readline() == "ready\n"
        record = BrokerRecord(0, "127.0.0.1:1", "127.0.0.1:2", broker.pid, str(data_dir))
        (cluster_dir / CLUSTER_FILE).write_text(ClusterRecord((record,)).to_json())
        assert is_running(record)

        started = time.monotonic()
        stop_cluster(cluster_dir, grace_s=linger_s * 5)

        assert not alive(broker.pid)
        assert time.monotonic() - started >= linger_s * 0.9
        assert broker.wait(timeout=5) == 0  # it ended on its own, not by a SIGKILL
    finally:
        broker.kill()
        broker.wait()


def test_zero_brokers_is_an_invalid_config(cluster_dir: Path) -> None:
    result = tierlog("up", "--dir", str(cluster_dir), "--brokers", "0")

    assert result.returncode == 2
    assert "INVALID_CONFIG: a cluster has at least 1 broker, not 0" in result.stderr
    assert not cluster_dir.exists()


def test_ports_beyond_the_last_are_an_invalid_config(cluster_dir: Path) -> None:
    result = tierlog("up", "--dir", str(cluster_dir), "--brokers", "3", "--base-port", "65531")

    assert result.returncode == 1
    assert "INVALID_CONFIG: 3 brokers need ports 65531..65539, beyond 1..65535" in result.stderr
    assert not sidecars_on(cluster_dir)


def test_another_broker_count_on_the_same_data_is_refused(cluster_dir: Path) -> None:
    up(cluster_dir, "--brokers", "1")
    assert tierlog("down", "--dir", str(cluster_dir)).returncode == 0

    result = tierlog("up", "--dir", str(cluster_dir), "--brokers", "2")

    assert result.returncode == 1
    assert "INVALID_CONFIG" in result.stderr and "--brokers 1" in result.stderr
    assert not sidecars_on(cluster_dir)


def test_status_and_down_without_a_cluster(cluster_dir: Path) -> None:
    cluster_dir.mkdir()
    status = tierlog("status", "--dir", str(cluster_dir))
    assert status.returncode == 1
    assert "CLUSTER_NOT_FOUND" in status.stderr
    down = tierlog("down", "--dir", str(cluster_dir))
    assert down.returncode == 0
    assert "nothing to stop" in down.stderr


@contextlib.contextmanager
def _taken_port_in_a_free_run(length: int, taken: int) -> Iterator[int]:
    """A first port of ``length`` ports that were all free a moment ago, with port
    ``first + taken`` held (listening) while the block runs. A run whose other ports
    someone holds is skipped: only the held one may make a broker fail."""
    for _ in range(100):
        with socket.socket() as held:
            held.bind(("127.0.0.1", 0))
            held.listen()
            first = held.getsockname()[1] - taken
            others = [first + i for i in range(length) if i != taken]
            if first > 1024 and all(_bindable(port) for port in others):
                yield first
                return
    raise AssertionError(f"no run of {length} free ports found")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_a_broker_that_cannot_start_stops_the_others_and_shows_its_log(
    cluster_dir: Path,
) -> None:
    with _taken_port_in_a_free_run(9, taken=3) as base_port:  # broker 1's gRPC port in use
        result = tierlog("up", "--dir", str(cluster_dir), "--base-port", str(base_port))

    assert result.returncode == 1
    assert "broker 1 did not start" in result.stderr
    assert f"Failed to bind to address 127.0.0.1:{base_port + 3}" in result.stderr  # its log
    assert result.stdout == ""
    assert not sidecars_on(cluster_dir)
    assert not (cluster_dir / "cluster.json").exists()


def test_every_broker_gets_the_tier_url(cluster_dir: Path, tmp_path: Path) -> None:
    tier_url = (tmp_path / "tier").as_uri()

    up(cluster_dir, "--brokers", "2", "--tier-url", tier_url)

    for broker in recorded(cluster_dir):
        log = (Path(str(broker["data_dir"])) / "tierlog-sidecar.log").read_text()
        assert f"remote tier: {tier_url}" in log


def test_one_broker_is_killed_stopped_and_started_again_and_cluster_json_stays_true(
    cluster_dir: Path,
) -> None:
    servers = up(cluster_dir, "--brokers", "3", "--config", "broker.session.timeout.ms=2000")
    before = recorded(cluster_dir)
    with AdminClient(servers.split(",")) as admin:
        admin.create_topic(TOPIC, PARTITIONS)
    with Producer({"bootstrap.servers": servers, "linger.ms": 0}) as producer:
        futures = [producer.send(TOPIC, b"v%d" % n, partition=n % PARTITIONS) for n in range(60)]
        acknowledged = sorted(
            (ack.partition, ack.offset) for ack in (f.result(30) for f in futures)
        )

    killed = tierlog("stop", "--dir", str(cluster_dir), "--broker", "1", "--signal", "KILL")

    assert killed.returncode == 0, killed.stderr
    assert f"stopped broker 1 (pid {before[1]['pid']}) with SIGKILL" in killed.stderr
    assert not alive(int(str(before[1]["pid"])))
    assert recorded(cluster_dir) == [before[0], {**before[1], "pid": None}, before[2]]
    status = tierlog("status", "--dir", str(cluster_dir))
    assert status.returncode == 1
    assert "broker(s) 1 down" in status.stderr
    assert "\tstopped\t" in status.stdout.splitlines()[1]
    again = tierlog("up", "--dir", str(cluster_dir), "--brokers", "3")
    assert again.returncode == 1 and "CLUSTER_ALREADY_RUNNING" in again.stderr  # 0 and 2 run

    started = tierlog("start", "--dir", str(cluster_dir), "--broker", "1")

    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == before[1]["address"]  # the same ports and settings
    restarted = recorded(cluster_dir)[1]
    assert restarted == {**before[1], "pid": restarted["pid"]}
    assert restarted["pid"] != before[1]["pid"] and alive(int(str(restarted["pid"])))
    assert sorted(sidecars_on(cluster_dir)) == sorted(
        int(str(b["pid"])) for b in recorded(cluster_dir)
    )
    status = tierlog("status", "--dir", str(cluster_dir))
    assert status.returncode == 0 and "3 of 3 brokers ready" in status.stdout, status.stdout
    twice = tierlog("start", "--dir", str(cluster_dir), "--broker", "1")
    assert twice.returncode == 1 and "CLUSTER_ALREADY_RUNNING" in twice.stderr

    stopped = tierlog("stop", "--dir", str(cluster_dir), "--broker", "2")  # SIGTERM

    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped broker 2 (pid {before[2]['pid']}) with SIGTERM" in stopped.stderr
    assert recorded(cluster_dir)[2] == {**before[2], "pid": None}
    assert tierlog("start", "--dir", str(cluster_dir), "--broker", "2").returncode == 0
    consumed = consume_all(servers, len(acknowledged))
    assert sorted((r.partition, r.offset) for r in consumed) == acknowledged  # nothing lost

    unknown = tierlog("stop", "--dir", str(cluster_dir), "--broker", "7")
    assert unknown.returncode == 1
    assert "INVALID_CONFIG: no broker 7" in unknown.stderr and "(brokers 0, 1, 2)" in unknown.stderr
    assert tierlog("down", "--dir", str(cluster_dir)).returncode == 0
    assert not sidecars_on(cluster_dir)


def test_a_clean_down_of_a_replicating_cluster_with_a_producer_connected_logs_no_error(
    cluster_dir: Path,
) -> None:
    servers = up(cluster_dir, "--brokers", "3")
    logs = [
        Path(str(broker["data_dir"])) / "tierlog-sidecar.log" for broker in recorded(cluster_dir)
    ]
    with AdminClient(servers.split(",")) as admin:
        admin.create_topic(TOPIC, PARTITIONS)  # 3 replicas each: every broker fetches
    with Producer({"bootstrap.servers": servers, "linger.ms": 5}) as producer:
        futures = [producer.send(TOPIC, b"v%d" % n, partition=n % PARTITIONS) for n in range(600)]
        assert all(future.result(30).offset >= 0 for future in futures)

        down = tierlog("down", "--dir", str(cluster_dir))  # its streams still open

    assert down.returncode == 0, down.stderr
    assert "SIGKILL" not in down.stderr  # each stopped on SIGTERM, within the grace
    for log in logs:
        text = log.read_text()
        assert "stopped cleanly" in text
        assert [line for line in text.splitlines() if " ERROR " in line] == [], text


def test_kafka_bootstrap_of_a_record_without_kafka_listeners_says_what_to_do(
    cluster_dir: Path,
) -> None:
    cluster_dir.mkdir()
    older = {"version": 1, "brokers": [{"node_id": 0, "address": "127.0.0.1:1",
             "metrics_address": "127.0.0.1:2", "pid": None, "data_dir": "d"}]}  # fmt: skip
    (cluster_dir / "cluster.json").write_text(json.dumps(older))

    status = tierlog("status", "--dir", str(cluster_dir), "--kafka-bootstrap")

    assert status.returncode == 1
    assert status.stdout == ""
    assert "serve no Kafka listener" in status.stderr and "then up" in status.stderr


def test_up_picks_ports_below_the_ephemeral_range(cluster_dir: Path) -> None:
    """The brokers bind them seconds later; meanwhile any outgoing connection on the
    machine could take a port from the kernel's ephemeral range."""
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    up(cluster_dir, "--brokers", "1")
    try:
        (broker,) = read_cluster(cluster_dir).brokers
        addresses = (broker.address, broker.metrics_address, str(broker.kafka_address))
        ports = [int(address.rpartition(":")[2]) for address in addresses]
        assert all(1024 <= port < ephemeral_start for port in ports), ports
    finally:
        assert tierlog("down", "--dir", str(cluster_dir)).returncode == 0


def _typed(servers: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``tierlog ARGS`` as a Kafka user types it, the first broker as the bootstrap server."""
    return subprocess.run(
        [console_script("tierlog"), *args, "--bootstrap-server", servers.split(",")[0]],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_topics_describe_on_a_cluster_tells_each_partitions_log_from_its_leader(
    cluster_dir: Path,
) -> None:
    """Not -1 for every partition the broker asked does not lead (issue 34, item 7)."""
    servers = up(cluster_dir, "--brokers", "3")
    created = _typed(servers, "topics", "--create", "--topic", TOPIC, "--partitions", "6")
    assert created.returncode == 0, created.stderr
    with Producer({"bootstrap.servers": servers, "linger.ms": 0}) as producer:
        for n in range(RECORDS):
            producer.send(TOPIC, b"v%d" % n, partition=n % PARTITIONS)
    described = _typed(servers, "topics", "--describe", "--topic", TOPIC)
    assert described.returncode == 0, described.stderr
    assert _leaders(described.stdout) == {0, 1, 2}  # two of three led elsewhere
    assert described.stdout.count(f"HighWatermark: {RECORDS // PARTITIONS}\t") == PARTITIONS
    assert "-1" not in described.stdout and "unknown" not in described.stdout


def test_acks_all_below_min_insync_replicas_names_not_enough_replicas_at_each_retry(
    cluster_dir: Path,
) -> None:
    """As Kafka's producer logs each retry, not silence until delivery.timeout.ms
    (issue 34, item 8)."""
    servers = up(
        cluster_dir,
        "--brokers",
        "2",
        "--config",
        "broker.session.timeout.ms=2000",
        "--config",
        "replica.lag.time.max.ms=1000",
    )
    created = _typed(
        servers,
        "topics",
        "--create",
        "--topic",
        "billing",
        "--replication-factor",
        "2",
        "--config",
        "min.insync.replicas=2",
    )
    assert created.returncode == 0, created.stderr
    stopped = tierlog("stop", "--broker", "1", "--dir", str(cluster_dir))
    assert stopped.returncode == 0, stopped.stderr
    deadline = time.monotonic() + 60
    while "\tIsr: 0\t" not in _typed(servers, "topics", "--describe", "--topic", "billing").stdout:
        assert time.monotonic() < deadline, "the ISR never shrank to broker 0"

    produced = _typed(
        servers,
        "produce",
        "--topic",
        "billing",
        "--producer-property",
        "acks=all",
        "--producer-property",
        "delivery.timeout.ms=5000",
        "--producer-property",
        "request.timeout.ms=3000",
        stdin="a record\n",
    )

    assert produced.returncode == 1
    *logged, failed = produced.stderr.splitlines()
    retries = [line for line in logged if "Got error produce response" in line]
    assert len(retries) >= 2, produced.stderr  # one per retry, as it happens
    for retry in retries:
        assert " WARNING Got error produce response on topic-partition billing-0, retrying (" in (
            retry
        )
        assert "Error: NOT_ENOUGH_REPLICAS: " in retry
    assert failed.startswith("tierlog produce: 1 of 1 records failed: ")
    assert "NOT_ENOUGH_REPLICAS" in failed
