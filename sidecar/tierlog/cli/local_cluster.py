"""A developer's cluster: ``tierlog-sidecar`` brokers on loopback, recorded in ``cluster.json``.

``start_cluster(directory, brokers)`` starts broker ``N`` (``node.id=N``) on the data
dir ``DIR/broker-N``, each told the whole broker list (``tierlog.cluster.brokers``, and
their Kafka listeners' addresses ``tierlog.cluster.kafka.brokers``: each broker serves
Kafka's wire protocol on a loopback port of its own beside gRPC) and
the cluster's partition-state store, ``DIR/state`` (``tierlog.replication.state.dir``):
the brokers replicate, topics get 3 replicas (fewer brokers: one on each) unless told
otherwise (``default.replication.factor``), and every broker's controller elects new
leaders when one goes.
The brokers list each other, so their gRPC and Kafka ports are chosen before they start (free
loopback ports, or from ``base_port``). They start at once, each in a session of its
own with its output in its data dir (``LocalSidecar.spawn``), and outlive the command
that started them.  ``DIR/cluster.json`` records them (atomically) as soon as they are
started, before the wait until every one is ready: it is the one record
``broker_states`` and ``stop_cluster`` work from, since no process remembers the
brokers for them, so even a command killed while waiting leaves nothing unfindable.
A broker that fails stops the others and takes the record with it.

A pid alone is not a broker: after a reboot or a ``kill -9`` it may name anything.  A
pid counts as the broker only while ``/proc/PID/cmdline`` is a ``tierlog-sidecar`` on
that broker's data dir (a zombie's is empty), so ``stop_cluster`` never signals a
stranger.  A stop then waits on the process's start time in ``/proc/PID/stat``, not its
command line: an exiting process loses its memory, and with it its command line, before
it closes its files and ports, and ``down`` returns only once they are closed.

Partitions hash over the broker count, so starting a DIR again with a different count
would hide the records of partitions whose owner changed: refused (``INVALID_CONFIG``).
``up`` and ``down`` on one DIR take turns (an ``flock`` on ``DIR/cluster.lock``, which
the brokers do not inherit): two at once would each find no cluster running, and the
loser's cleanup would remove the winner's record.

One broker stops and starts again on its own (``stop_broker``, ``start_broker``; a
fault test's ``kill -9`` too): the record keeps each broker's configs, so it comes back
on the same ports with the same settings, and says which pid runs it (``None``: stopped
on purpose), under the same lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import ClassVar

from tierlog.cli.local_sidecar import LocalSidecar, SidecarFailed, http_get
from tierlog.cli.loopback_ports import free_ports
from tierlog.cli.stop_signals import Pause
from tierlog.file_lock import exclusive_lock
from tierlog.storage.checkpoints import atomic_write
from tierlog.storage.errors import InvalidConfigError, TierlogError
from tierlog.tools.progress import Track, no_progress

__all__ = [
    "CLUSTER_FILE",
    "LOCK_FILE",
    "STOP_GRACE_S",
    "BrokerFailed",
    "BrokerRecord",
    "BrokerState",
    "ClusterRecord",
    "ClusterRunningError",
    "NoClusterError",
    "broker_states",
    "is_running",
    "read_cluster",
    "start_broker",
    "start_cluster",
    "stop_broker",
    "stop_cluster",
]

CLUSTER_FILE = "cluster.json"
LOCK_FILE = "cluster.lock"  # held by up and down: one at a time per DIR
_BROKER_DIR = "broker-"
STATE_DIR = "state"  # the partition-state store every broker shares
DEFAULT_REPLICATION_FACTOR = 3
_VERSION = 1
READY_TIMEOUT_S = 60.0  # a broker recovering a big log takes a while
STOP_GRACE_S = 30.0  # the sidecar's own default shutdown grace
_KILL_WAIT_S = 10.0
_POLL_S = 0.05
_MAX_PORT = 65535
_PORTS_PER_BROKER = 3  # gRPC, metrics, Kafka


class ClusterRunningError(TierlogError):
    """The directory already holds a cluster with brokers running."""

    reason: ClassVar[str] = "CLUSTER_ALREADY_RUNNING"


class NoClusterError(TierlogError):
    """The directory holds no ``cluster.json``."""

    reason: ClassVar[str] = "CLUSTER_NOT_FOUND"


class BrokerFailed(SidecarFailed):
    """A broker of a starting cluster exited or was not ready: the others were stopped."""

    def __init__(self, node_id: int, log_path: Path, detail: str) -> None:
        super().__init__(f"broker {node_id} did not start ({log_path}): {detail}")
        self.node_id = node_id
        self.log_path = log_path


@dataclass(frozen=True)
class BrokerRecord:
    node_id: int
    address: str  # gRPC HOST:PORT
    metrics_address: str  # HOST:PORT of /metrics, /healthz and /readyz
    pid: int | None  # None: stopped by ``stop_broker``
    data_dir: str
    configs: tuple[str, ...] = ()  # KEY=VALUE, as it was started with (empty: not recorded)
    kafka_address: str | None = None  # Kafka's wire protocol (None: a record from before)


@dataclass(frozen=True)
class ClusterRecord:
    brokers: tuple[BrokerRecord, ...]

    @property
    def servers(self) -> str:
        """The ``--server`` (``bootstrap.servers``) list: every broker's address."""
        return ",".join(broker.address for broker in self.brokers)

    @property
    def kafka_bootstrap(self) -> str:
        """Kafka clients' ``bootstrap.servers``: every broker's Kafka listener."""
        return ",".join(b.kafka_address for b in self.brokers if b.kafka_address is not None)

    def to_json(self) -> str:
        brokers = [asdict(broker) for broker in self.brokers]
        return json.dumps({"version": _VERSION, "brokers": brokers}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ClusterRecord:
        try:
            document = json.loads(text)
            if document.get("version") != _VERSION:
                raise ValueError(f"unknown version {document.get('version')!r}")
            brokers = tuple(
                BrokerRecord(**{**broker, "configs": tuple(broker.get("configs", ()))})
                for broker in document["brokers"]
            )
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise InvalidConfigError(f"not a {CLUSTER_FILE}: {error}") from None
        return cls(brokers)


@dataclass(frozen=True)
class BrokerState:
    broker: BrokerRecord
    running: bool  # its pid is still this broker's sidecar
    ready: bool  # /readyz answered 200

    @property
    def up(self) -> bool:
        return self.running and self.ready


def read_cluster(directory: Path) -> ClusterRecord:
    """The cluster recorded in ``directory``; NoClusterError when there is none."""
    try:
        text = (directory / CLUSTER_FILE).read_text()
    except FileNotFoundError:
        raise NoClusterError(f"no {CLUSTER_FILE} in {directory}: no cluster there") from None
    return ClusterRecord.from_json(text)


def is_running(broker: BrokerRecord) -> bool:
    """Whether ``broker.pid`` is still a sidecar on the broker's data dir (not a zombie,
    not a stranger that reused the pid)."""
    if broker.pid is None:
        return False
    try:
        arguments = Path(f"/proc/{broker.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # gone (or no /proc: then it cannot be told apart, and counts as gone)
        return False
    names = {Path(argument.decode(errors="replace")).name for argument in arguments}
    return "tierlog-sidecar" in names and broker.data_dir.encode() in arguments


def broker_states(cluster: ClusterRecord) -> list[BrokerState]:
    states = []
    for broker in cluster.brokers:
        running = is_running(broker)
        ready = running and http_get(broker.metrics_address, "/readyz", 2.0)[0] == 200
        states.append(BrokerState(broker, running, ready))
    return states


@dataclass(frozen=True)
class _Ports:
    grpc: int
    metrics: int
    kafka: int


def _ports(brokers: int, base_port: int | None) -> list[_Ports]:
    """Each broker's ports: gRPC ``base_port + 3N``, metrics the next, Kafka the one
    after; or free ones."""
    count = _PORTS_PER_BROKER * brokers
    if base_port is None:
        flat = free_ports(count)
    elif 1 <= base_port <= _MAX_PORT + 1 - count:
        flat = list(range(base_port, base_port + count))
    else:
        raise InvalidConfigError(
            f"{brokers} brokers need ports {base_port}..{base_port + count - 1}, "
            f"beyond 1..{_MAX_PORT}"
        )
    return [_Ports(*flat[n : n + _PORTS_PER_BROKER]) for n in range(0, count, _PORTS_PER_BROKER)]


def _check_reusable(directory: Path, brokers: int) -> None:
    """Refuse a DIR whose brokers run, or whose data was written by another broker count."""
    with contextlib.suppress(NoClusterError):
        running = [b for b in read_cluster(directory).brokers if is_running(b)]
        if running:
            pids = ", ".join(f"broker {b.node_id} pid {b.pid}" for b in running)
            raise ClusterRunningError(
                f"{directory} already holds a running cluster ({pids}): "
                f"tierlog cluster down --dir {directory} first"
            )
    earlier = sorted(path.name for path in directory.glob(f"{_BROKER_DIR}*") if path.is_dir())
    if earlier and len(earlier) != brokers:
        raise InvalidConfigError(
            f"{directory} holds the data of {len(earlier)} brokers ({', '.join(earlier)}); "
            f"partitions hash over the broker count, so --brokers {brokers} would hide "
            f"records: use --brokers {len(earlier)}, or another directory"
        )


def start_cluster(
    directory: Path,
    brokers: int,
    *,
    base_port: int | None = None,
    configs: Sequence[str] = (),
    track: Track = no_progress,
    ready_timeout_s: float = READY_TIMEOUT_S,
    pause: Pause = time.sleep,
) -> ClusterRecord:
    """Start ``brokers`` sidecars on loopback over ``directory`` and record them; every
    broker gets ``configs`` (``KEY=VALUE``) too.  If one fails, or ``pause`` raises
    while they start (a stop signal: ``StopSignals.pause``), all are stopped, and
    BrokerFailed names the failed one."""
    if brokers < 1:
        raise InvalidConfigError(f"a cluster has at least 1 broker, not {brokers}")
    ports = _ports(brokers, base_port)
    directory = directory.resolve()  # the brokers' command lines name it: absolute
    directory.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(directory / LOCK_FILE):
        _check_reusable(directory, brokers)
        return _start(directory, ports, configs, track, ready_timeout_s, pause)


def _start(
    directory: Path,
    ports: list[_Ports],
    configs: Sequence[str],
    track: Track,
    ready_timeout_s: float,
    pause: Pause,
) -> ClusterRecord:
    broker_list = ",".join(f"{n}@127.0.0.1:{port.grpc}" for n, port in enumerate(ports))
    kafka_list = ",".join(f"{n}@127.0.0.1:{port.kafka}" for n, port in enumerate(ports))
    replication = (
        f"tierlog.replication.state.dir={directory / STATE_DIR}",
        f"default.replication.factor={min(len(ports), DEFAULT_REPLICATION_FACTOR)}",
    )
    started: list[LocalSidecar] = []
    own_configs: list[tuple[str, ...]] = []
    try:
        for node_id, port in enumerate(ports):
            own = (
                f"node.id={node_id}",
                f"listeners=PLAINTEXT://127.0.0.1:{port.kafka}",  # gRPC's: ``listen``
                f"tierlog.cluster.brokers={broker_list}",
                f"tierlog.cluster.kafka.brokers={kafka_list}",
                *replication,
                *configs,  # the caller's, after ours: theirs win
            )
            own_configs.append(own)
            data_dir = directory / f"{_BROKER_DIR}{node_id}"
            started.append(
                LocalSidecar.spawn(
                    data_dir,
                    own,
                    listen=f"127.0.0.1:{port.grpc}",
                    metrics_listen=f"127.0.0.1:{port.metrics}",
                    pause=pause,
                )
            )
        cluster = ClusterRecord(
            tuple(
                BrokerRecord(
                    n,
                    f"127.0.0.1:{port.grpc}",
                    f"127.0.0.1:{port.metrics}",
                    s.pid,
                    str(s.data_dir),
                    own,
                    f"127.0.0.1:{port.kafka}",
                )
                for n, (port, s, own) in enumerate(zip(ports, started, own_configs, strict=True))
            )
        )
        # Recorded before they are ready: a command killed while waiting leaves brokers
        # that ``stop_cluster`` still finds.
        atomic_write(directory / CLUSTER_FILE, cluster.to_json())
        _wait_all_ready(started, track, ready_timeout_s)
    except BaseException:
        for sidecar in started:
            sidecar.stop()
        (directory / CLUSTER_FILE).unlink(missing_ok=True)
        raise
    return cluster


def _wait_all_ready(started: list[LocalSidecar], track: Track, timeout_s: float) -> None:
    """They recover at once; the deadline is shared, so waiting for one is time the
    others used too."""
    deadline = time.monotonic() + timeout_s
    with track("brokers ready", len(started), "broker") as advance:
        for node_id, sidecar in enumerate(started):
            try:
                sidecar.wait_ready(max(deadline - time.monotonic(), 0.0))
            except SidecarFailed as failure:
                raise _broker_failed(node_id, sidecar, failure) from failure
            advance(1)


def _broker_failed(node_id: int, sidecar: LocalSidecar, failure: SidecarFailed) -> BrokerFailed:
    """The failure of broker ``node_id`` to start, in one line (its log has the rest)."""
    first_line = str(failure).partition("\n")[0].rstrip(":")
    return BrokerFailed(node_id, sidecar.log_path, first_line)


def stop_cluster(
    directory: Path,
    *,
    delete_data: bool = False,
    grace_s: float = STOP_GRACE_S,
    say: Callable[[str], None] = lambda _line: None,
) -> None:
    """SIGTERM every broker still running, SIGKILL those still there after ``grace_s``,
    then forget the cluster (its data too with ``delete_data``).  Nothing to stop is
    not an error: stopping twice is stopping once."""
    if not directory.is_dir():
        say(f"no directory {directory}: nothing to stop")
        return
    with exclusive_lock(directory / LOCK_FILE):
        try:
            cluster = read_cluster(directory)
        except NoClusterError:
            say(f"no {CLUSTER_FILE} in {directory}: nothing to stop")
        else:
            stopped = _stop(cluster.brokers, signal.SIGTERM, grace_s, say)
            say(f"stopped {stopped} of {len(cluster.brokers)} brokers")
            (directory / CLUSTER_FILE).unlink()
        if delete_data:
            for data_dir in [*directory.glob(f"{_BROKER_DIR}*"), directory / STATE_DIR]:
                shutil.rmtree(data_dir, ignore_errors=data_dir.name == STATE_DIR)


def _stop(
    brokers: Sequence[BrokerRecord],
    signum: signal.Signals,
    grace_s: float,
    say: Callable[[str], None],
) -> int:
    """``signum`` to those of ``brokers`` still running, SIGKILL to any still there after
    ``grace_s``; how many were running."""
    running = [
        _RunningBroker(broker, started)
        for broker in brokers
        if is_running(broker) and (started := _start_time(_pid(broker))) is not None
    ]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signum)
    stragglers = _wait_gone(running, grace_s)
    for process in stragglers:
        broker = process.broker
        say(f"broker {broker.node_id} (pid {broker.pid}) outlived {grace_s:.0f} s: SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    if survivors := _wait_gone(stragglers, _KILL_WAIT_S):
        raise SidecarFailed(f"brokers survived SIGKILL: {[p.broker for p in survivors]}")
    return len(running)


def _pid(broker: BrokerRecord) -> int:
    assert broker.pid is not None, "a running broker has a pid"
    return broker.pid


@dataclass(frozen=True)
class _RunningBroker:
    """A broker's process, told from a later one on the same pid by its start time."""

    broker: BrokerRecord
    started: int  # clock ticks after boot (``/proc/PID/stat``'s 22nd field)

    @property
    def pid(self) -> int:
        return _pid(self.broker)

    def has_ended(self) -> bool:
        return _start_time(self.pid) != self.started


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot; None once it has ended
    (gone, or a zombie: its files and ports are closed)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the name before it may hold spaces
    state, started = fields[0], fields[19]
    return None if state in ("Z", "X") else int(started)


def _recorded_broker(directory: Path, node_id: int) -> tuple[ClusterRecord, BrokerRecord]:
    cluster = read_cluster(directory)
    for broker in cluster.brokers:
        if broker.node_id == node_id:
            return cluster, broker
    known = ", ".join(str(broker.node_id) for broker in cluster.brokers)
    raise InvalidConfigError(f"no broker {node_id} in {directory / CLUSTER_FILE} (brokers {known})")


def _record_broker(directory: Path, cluster: ClusterRecord, broker: BrokerRecord) -> None:
    """Rewrite the record with ``broker`` in its place (atomically)."""
    brokers = tuple(broker if b.node_id == broker.node_id else b for b in cluster.brokers)
    atomic_write(directory / CLUSTER_FILE, ClusterRecord(brokers).to_json())


def stop_broker(
    directory: Path,
    node_id: int,
    *,
    signum: signal.Signals = signal.SIGTERM,
    grace_s: float = STOP_GRACE_S,
    say: Callable[[str], None] = lambda _line: None,
) -> None:
    """Stop broker ``node_id`` with ``signum`` (SIGTERM: its controlled shutdown; SIGKILL:
    a crash), SIGKILL after ``grace_s``, and record it stopped.  A broker not running is
    recorded stopped too."""
    with exclusive_lock(directory / LOCK_FILE):
        cluster, broker = _recorded_broker(directory, node_id)
        if _stop([broker], signum, grace_s, say):
            say(f"stopped broker {node_id} (pid {broker.pid}) with {signum.name}")
        else:
            say(f"broker {node_id} was not running")
        _record_broker(directory, cluster, replace(broker, pid=None))


def start_broker(
    directory: Path,
    node_id: int,
    *,
    ready_timeout_s: float = READY_TIMEOUT_S,
    pause: Pause = time.sleep,
) -> BrokerRecord:
    """Start broker ``node_id`` of the recorded cluster again, as it was started (ports,
    configs), record its pid and wait until it is ready; a broker that fails, or whose
    wait ``pause`` ends by raising (a stop signal), is stopped and recorded so
    (BrokerFailed for a failure)."""
    directory = directory.resolve()  # as the record names it
    with exclusive_lock(directory / LOCK_FILE):
        cluster, broker = _recorded_broker(directory, node_id)
        if is_running(broker):
            raise ClusterRunningError(f"broker {node_id} already runs (pid {broker.pid})")
        if not broker.configs:
            raise InvalidConfigError(
                f"{directory / CLUSTER_FILE} has no configs for broker {node_id} (written by "
                f"an older tierlog): tierlog cluster down --dir {directory}, then up"
            )
        sidecar = LocalSidecar.spawn(
            Path(broker.data_dir),
            broker.configs,
            listen=broker.address,
            metrics_listen=broker.metrics_address,
            pause=pause,
        )
        started = replace(broker, pid=sidecar.pid)
        _record_broker(directory, cluster, started)  # before the wait, as ``up`` does
        try:
            sidecar.wait_ready(ready_timeout_s)
        except BaseException as failure:
            sidecar.stop()
            _record_broker(directory, cluster, replace(broker, pid=None))
            if isinstance(failure, SidecarFailed):
                raise _broker_failed(node_id, sidecar, failure) from failure
            raise
        return started


def _wait_gone(running: list[_RunningBroker], timeout_s: float) -> list[_RunningBroker]:
    """Those of ``running`` not ended after ``timeout_s`` (not our children: polled)."""
    deadline = time.monotonic() + timeout_s
    left = [process for process in running if not process.has_ended()]
    while left and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        left = [process for process in left if not process.has_ended()]
    return left
