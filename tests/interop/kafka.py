"""Apache Kafka's own programs, driven from the tests: the judge of byte compatibility.

``make tools`` (tests/tools/bootstrap.py) installs Kafka's released jars and our
Java helpers (tests/interop/java/) into ``.cache/tools/kafka-<version>/``. This module
finds them (failing with a pointer at ``make tools``, never skipping), and offers:

- ``run_dump_log_segments`` (raw text), ``dump_log_segments`` (parsed) and
  ``verify_partition_dir`` (all of Kafka's checks over a partition directory, ``errors
  == []`` when it finds nothing): ``kafka.tools.DumpLogSegments`` over segment and
  index files; ``parse_dump`` reads what it prints (batches, records, index entries,
  and the findings of its index checks, which it prints on stderr and exits 0 with);
- ``KafkaBroker``: a fresh single-node KRaft broker (combined broker+controller) on
  loopback ports, formatted with ``kafka.tools.StorageTool``, stopped with SIGTERM so
  it shuts down cleanly (or ``kill``-ed with SIGKILL), and ``restart``-able on the same
  log dirs; with ``create_topic`` (Admin client), ``produce`` (the real Java producer:
  keys, values, headers, timestamps, any codec, batch control) and ``consume`` (the real
  Java consumer, from the beginning of a partition, plus its ListOffsets answers);
- ``KafkaCluster``: N brokers and one KRaft controller, its own JVM or broker 0's (each a
  ``KafkaBroker``, its own JVM and dirs, one cluster id), for replication: topics with a
  replication factor and the partition's leader through Kafka's ``TopicCommand``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import importlib.util
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Self

from tests.support.sidecars import free_port

__all__ = [
    "BatchEntry",
    "ConsumedPartition",
    "ConsumedRecord",
    "DumpOutput",
    "FileDump",
    "IndexEntry",
    "KafkaBroker",
    "KafkaCluster",
    "KafkaTools",
    "KafkaToolsMissing",
    "ProducedRecord",
    "ProducerRecord",
    "RecordEntry",
    "TimeIndexEntry",
    "dump_log_segments",
    "kafka_tools",
    "parse_dump",
    "run_dump_log_segments",
    "segment_files",
    "verify_partition_dir",
]

REPO = Path(__file__).resolve().parents[2]
BOOTSTRAP_SCRIPT = REPO / "tests" / "tools" / "bootstrap.py"

# Short runs of small JVMs: quick startup matters more than peak throughput.
TOOL_JVM_ARGS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")
# Keys and payloads come back as text: make the JVM print UTF-8 whatever the locale.
UTF8_OUTPUT = (
    "-Dfile.encoding=UTF-8",
    "-Dsun.stdout.encoding=UTF-8",
    "-Dsun.stderr.encoding=UTF-8",
    "-Dstdout.encoding=UTF-8",
    "-Dstderr.encoding=UTF-8",
)
BROKER_JVM_ARGS = ("-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
# slf4j-simple: warnings only, plus the one line that says the server is up.
QUIET_LOGGING = (
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.log.kafka.server.KafkaRaftServer=info",
)
BROKER_STARTED = "Kafka Server started"


class KafkaToolsMissing(RuntimeError):
    """Kafka's jars are not installed, or are older than their inputs."""


@functools.cache
def _load_bootstrap() -> ModuleType:
    """tests/tools/bootstrap.py, which owns where tools live and when they are current."""
    name = "tierlog_tests_bootstrap"
    spec = importlib.util.spec_from_file_location(name, BOOTSTRAP_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


# --- the installed tools --------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaTools:
    """An installed Kafka: where its jars are, and how to run its programs."""

    home: Path
    java: Path
    version: str

    @classmethod
    def locate(cls) -> KafkaTools:
        bootstrap = _load_bootstrap()
        tool = bootstrap.KAFKA
        if not (tool.home / "libs").is_dir():
            raise KafkaToolsMissing(
                f"Apache Kafka's jars are not installed in {tool.home}; run `make tools`"
            )
        if not tool.is_current():
            raise KafkaToolsMissing(
                f"{tool.home} is older than tests/tools/kafka/pom.xml or tests/interop/java/; "
                "run `make tools`"
            )
        return cls(home=tool.home, java=bootstrap.java_bin("java"), version=bootstrap.KAFKA_VERSION)

    @property
    def classpath(self) -> str:
        return f"{self.home / 'libs'}/*{os.pathsep}{self.home / 'classes'}"

    def command(
        self, main_class: str, *args: str | Path, jvm_args: Sequence[str] = TOOL_JVM_ARGS
    ) -> list[str]:
        return [
            str(self.java),
            *jvm_args,
            *UTF8_OUTPUT,
            *QUIET_LOGGING,
            *jvm_args,
            "-cp",
            self.classpath,
            main_class,
            *(str(arg) for arg in args),
        ]

    def execute(
        self, main_class: str, *args: str | Path, timeout_s: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a Kafka (or helper) main class to completion, whatever its exit code."""
        return subprocess.run(
            self.command(main_class, *args),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout_s,
            check=False,
        )

    def run(self, main_class: str, *args: str | Path, timeout_s: float = 120) -> str:
        """Run a Kafka (or helper) main class; its stdout, or an error with its output."""
        done = self.execute(main_class, *args, timeout_s=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(
                f"{main_class} exited {done.returncode}\n$ {' '.join(done.args)}\n"
                f"--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-4000:]}"
            )
        return done.stdout

    def dump_log_segments(self, files: Iterable[Path], *flags: str) -> DumpOutput:
        """DumpLogSegments over ``files``, parsed; a non-zero exit is one more error."""
        paths = [str(path) for path in files]
        if not paths:
            raise ValueError("DumpLogSegments needs at least one file")
        done = self.execute("kafka.tools.DumpLogSegments", *flags, "--files", ",".join(paths))
        output = parse_dump(done.stdout, done.stderr)
        if done.returncode != 0:
            output.errors.append(f"DumpLogSegments exited {done.returncode}")
        return output


@functools.cache
def kafka_tools() -> KafkaTools:
    """The installed Kafka, located once per process."""
    return KafkaTools.locate()


def run_dump_log_segments(files: Iterable[Path], *flags: str) -> str:
    """``kafka.tools.DumpLogSegments <flags> --files f1,f2``: its stdout, then its stderr.

    Flags in Kafka 4.1.1: ``--deep-iteration`` (records inside batches),
    ``--print-data-log`` (keys and payloads; implies deep iteration),
    ``--verify-index-only`` (check .index/.timeindex entries against the .log, print
    only the findings), ``--index-sanity-check`` (the broker's startup check of an
    index file; throws on failure). A .timeindex is always checked against its .log
    (through its .index) when dumped. Raises if the tool exits non-zero.
    """
    paths = [str(path) for path in files]
    done = kafka_tools().execute("kafka.tools.DumpLogSegments", *flags, "--files", ",".join(paths))
    if done.returncode != 0:
        raise RuntimeError(
            f"DumpLogSegments exited {done.returncode}:\n{done.stdout[-4000:]}{done.stderr}"
        )
    return done.stdout + done.stderr


def dump_log_segments(files: Iterable[Path], *flags: str) -> DumpOutput:
    """Like ``run_dump_log_segments``, parsed into a ``DumpOutput``; never raises on findings."""
    return kafka_tools().dump_log_segments(files, *flags)


def segment_files(partition_dir: Path) -> list[Path]:
    """The .log, .index and .timeindex files of a partition directory, by base offset."""
    suffixes = (".log", ".index", ".timeindex")
    return sorted(
        (path for path in partition_dir.iterdir() if path.suffix in suffixes),
        key=lambda path: (path.stem, suffixes.index(path.suffix)),
    )


def verify_partition_dir(partition_dir: Path) -> DumpOutput:
    """Kafka's checks of every segment in a partition directory, in two JVM runs:

    1. ``--print-data-log --verify-index-only`` over all .log/.index/.timeindex files:
       every batch and record (CRC validity, consecutive offsets, keys, payloads), every
       .index entry points at a batch ending at its offset, every .timeindex entry is
       its batch's max timestamp, increasing;
    2. ``--index-sanity-check`` over the indexes (what a broker checks at startup).

    Returns both runs' results merged: ``errors == []`` means Kafka found nothing wrong.
    """
    files = segment_files(partition_dir)
    if not files:
        raise FileNotFoundError(f"no segment files in {partition_dir}")
    output = dump_log_segments(files, "--print-data-log", "--verify-index-only")
    indexes = [path for path in files if path.suffix != ".log"]
    output.extend(dump_log_segments(indexes, "--index-sanity-check"))
    return output


# --- records in and out of the real producer -------------------------------------------------


@dataclass(frozen=True)
class ProducerRecord:
    """One record to send; ``timestamp_ms=None`` lets the producer stamp it."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None
    compression: str | None = None  # none, gzip, snappy, lz4, zstd; None: producer default
    partition: int | None = None

    def to_json(self) -> str:
        def b64(data: bytes | None) -> str | None:
            return None if data is None else base64.b64encode(data).decode()

        return json.dumps(
            {
                "key": b64(self.key),
                "value": b64(self.value),
                "headers": [{"key": k, "value": b64(v)} for k, v in self.headers],
                "timestamp": self.timestamp_ms,
                "compression": self.compression,
                "partition": self.partition,
            }
        )


@dataclass(frozen=True)
class ProducedRecord:
    """A record as Kafka acknowledged it: what was sent, and where it landed."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    compression: str | None


@dataclass(frozen=True)
class ConsumedRecord:
    """A record as Kafka's consumer returned it."""

    offset: int
    timestamp_ms: int
    timestamp_type: str  # CreateTime, LogAppendTime
    leader_epoch: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class ConsumedPartition:
    """What the consumer read from a partition, and the broker's ListOffsets answers:
    the beginning (log start) and end (high watermark) offsets, and for each asked
    timestamp the (offset, timestamp) of the first record at or after it, or None."""

    records: list[ConsumedRecord]
    beginning_offset: int
    end_offset: int
    offsets_for_times: dict[int, tuple[int, int] | None]


def _unb64(data: str | None) -> bytes | None:
    return None if data is None else base64.b64decode(data)


# --- the broker -----------------------------------------------------------------------------


def _random_cluster_id() -> str:
    """A Kafka Uuid string: 16 random bytes, URL-safe base64 without padding."""
    while True:
        cluster_id = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        if not cluster_id.startswith("-"):  # would read as a command-line flag
            return cluster_id


@dataclass
class KafkaBroker:
    """A fresh single-node KRaft Kafka (broker+controller) on 127.0.0.1 only.

    ``with KafkaBroker(tools, workdir) as broker:`` formats ``workdir/data`` and
    ``workdir/metadata``, starts the broker and waits until it is serving; leaving
    the block (or ``stop()``) sends SIGTERM and waits for the clean shutdown, after
    which the log directory holds Kafka's closed, flushed files.

    One node of a larger cluster (``KafkaCluster``) takes ``process_roles`` ``broker``
    or ``controller``, the cluster's ``controller_voters`` and its ``cluster_id``.
    """

    tools: KafkaTools
    workdir: Path
    broker_configs: Mapping[str, str] = field(default_factory=dict)
    # slf4j-simple levels by logger name, over QUIET_LOGGING's, e.g.
    # {"org.apache.kafka.storage.internals.log.LogLoader": "info"}
    log_levels: Mapping[str, str] = field(default_factory=dict)
    start_timeout_s: float = 90.0
    node_id: int = 1
    broker_port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    process_roles: str = "broker,controller"
    controller_voters: str = ""  # "": this node alone, on its controller port
    cluster_id: str = field(default_factory=_random_cluster_id)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _log_start: int = field(default=0, init=False, repr=False)  # this run's part of log_file

    @property
    def bootstrap_server(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def pid(self) -> int:
        """The running broker's process id (a benchmark reads its CPU time)."""
        if self._process is None:
            raise RuntimeError("the broker is not running")
        return self._process.pid

    @property
    def log_file(self) -> Path:
        return self.workdir / "broker.log"

    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        return self.log_dir / f"{topic}-{partition}"

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles.split(",")

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles.split(",")

    def _listeners(self) -> dict[str, str]:
        """Each role's listener: PLAINTEXT for clients and brokers, CONTROLLER for KRaft."""
        listeners = []
        if self.is_broker:
            listeners.append(f"PLAINTEXT://127.0.0.1:{self.broker_port}")
        if self.is_controller:
            listeners.append(f"CONTROLLER://127.0.0.1:{self.controller_port}")
        advertised = {"advertised.listeners": listeners[0]} if self.is_broker else {}
        return {"listeners": ",".join(listeners), **advertised}

    def server_properties(self) -> dict[str, str]:
        voters = self.controller_voters or f"{self.node_id}@127.0.0.1:{self.controller_port}"
        return {
            "process.roles": self.process_roles,
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            **self._listeners(),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "metadata.log.dir": str(self.workdir / "metadata"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            # Tests write old timestamps: keep everything, never clean behind their back.
            "log.retention.ms": "-1",
            "log.retention.check.interval.ms": str(3600 * 1000),
            **self.broker_configs,
        }

    def start(self) -> Self:
        if self._process is not None:
            raise RuntimeError("broker already started")
        self.workdir.mkdir(parents=True, exist_ok=True)
        properties = self.workdir / "server.properties"
        properties.write_text(
            "".join(f"{key}={value}\n" for key, value in self.server_properties().items())
        )
        if not (self.log_dir / "meta.properties").exists():
            self.tools.run(
                "kafka.tools.StorageTool",
                "format",
                "--config",
                properties,
                "--cluster-id",
                self.cluster_id,
            )
        levels = [f"-Dorg.slf4j.simpleLogger.log.{k}={v}" for k, v in self.log_levels.items()]
        cmd = self.tools.command("kafka.Kafka", properties, jvm_args=(*BROKER_JVM_ARGS, *levels))
        with self.log_file.open("ab") as log:
            self._log_start = log.tell()
            # A session of its own, as each tierlog broker has (``LocalSidecar.spawn``):
            # with the kernel's autogroup scheduling on, CPU is shared between sessions
            # first, and JVMs left in their client's session shared its one share, so a
            # benchmark's client got less CPU beside busy tierlog brokers than beside
            # busy JVMs (docs/BENCHMARKS.md, "where led again's time goes").
            self._process = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._wait_until_started()
        return self

    def _wait_until_started(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        assert self._process is not None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"Kafka broker exited with {self._process.returncode} while starting; "
                    f"log tail:\n{self._log_tail()}"
                )
            if BROKER_STARTED in self.run_log():
                return
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(
            f"Kafka broker not started within {self.start_timeout_s} s; log tail:\n"
            f"{self._log_tail()}"
        )

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def run_log(self) -> str:
        """What the broker logged since its latest start (``log_file`` keeps every run)."""
        with contextlib.suppress(OSError), self.log_file.open("rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace")
        return ""

    def _log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM and wait: Kafka's controlled, clean shutdown (indexes trimmed, marker)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise RuntimeError(
                f"Kafka broker ignored SIGTERM for {timeout_s} s and was killed; log tail:\n"
                f"{self._log_tail()}"
            ) from None

    def kill(self) -> None:
        """SIGKILL, as a crash: no controlled shutdown, nothing flushed, no clean marker."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def restart(self) -> Self:
        """Stop (cleanly) if running, then start again on the same dirs and ports."""
        self.stop()
        return self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- clients ----------------------------------------------------------------------------

    def create_topic(
        self, topic: str, configs: Mapping[str, str] | None = None, *, partitions: int = 1
    ) -> None:
        """Create a topic with explicit topic configs through Kafka's Admin client."""
        args: list[str] = ["--bootstrap-server", self.bootstrap_server, "--topic", topic]
        args += ["--partitions", str(partitions)]
        for key, value in (configs or {}).items():
            args += ["--config", f"{key}={value}"]
        self.tools.run("CreateTopic", *args)

    def produce(
        self,
        topic: str,
        records: Sequence[ProducerRecord],
        *,
        flush_every: int = 0,
        producer_configs: Mapping[str, str] | None = None,
    ) -> list[ProducedRecord]:
        """Send with Kafka's Java producer, in order; returns where each record landed.

        ``flush_every=N`` closes the open batch after every N records (and records
        change codec only at a flush), so with the default ``batch.size`` each batch
        holds exactly N small records. Producer configs pass through unchanged.
        """
        with tempfile.NamedTemporaryFile(
            "w", suffix=".jsonl", dir=self.workdir, delete=False
        ) as jsonl:
            jsonl.write("".join(record.to_json() + "\n" for record in records))
        try:
            args: list[str] = ["--bootstrap-server", self.bootstrap_server, "--topic", topic]
            args += ["--input", jsonl.name, "--flush-every", str(flush_every)]
            for key, value in (producer_configs or {}).items():
                args += ["--producer-config", f"{key}={value}"]
            output = self.tools.run("ProduceRecords", *args, timeout_s=300)
        finally:
            Path(jsonl.name).unlink()
        acks = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
        if len(acks) != len(records):
            raise RuntimeError(f"producer acknowledged {len(acks)} of {len(records)} records")
        return [
            ProducedRecord(
                partition=ack["partition"],
                offset=ack["offset"],
                timestamp_ms=ack["timestamp"],
                key=record.key,
                value=record.value,
                headers=record.headers,
                compression=record.compression,
            )
            for ack, record in zip(acks, records, strict=True)
        ]

    def consume(
        self,
        topic: str,
        partition: int = 0,
        *,
        max_records: int | None = None,
        timeout_s: float = 60.0,
        offsets_for_times: Sequence[int] = (),
        consumer_configs: Mapping[str, str] | None = None,
    ) -> ConsumedPartition:
        """Read a partition from its beginning with Kafka's Java consumer (assigned, no
        group, CRCs checked): ``max_records`` records, or by default up to the end offset
        the broker reports at the start. Raises if that takes longer than ``timeout_s``.
        ``offsets_for_times`` are looked up with ``offsetsForTimes`` after reading."""
        args: list[str] = ["--bootstrap-server", self.bootstrap_server, "--topic", topic]
        args += ["--partition", str(partition), "--timeout-ms", str(int(timeout_s * 1000))]
        if max_records is not None:
            args += ["--max-records", str(max_records)]
        for timestamp in offsets_for_times:
            args += ["--offset-for-time", str(timestamp)]
        for key, value in (consumer_configs or {}).items():
            args += ["--consumer-config", f"{key}={value}"]
        output = self.tools.run("ConsumeRecords", *args, timeout_s=timeout_s + 60)
        rows = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
        records = [
            ConsumedRecord(
                offset=row["offset"],
                timestamp_ms=row["timestamp"],
                timestamp_type=row["timestampType"],
                leader_epoch=row["leaderEpoch"],
                key=_unb64(row["key"]),
                value=_unb64(row["value"]),
                headers=tuple((h["key"], _unb64(h["value"])) for h in row["headers"]),
            )
            for row in rows
            if row["kind"] == "record"
        ]
        (summary,) = (row for row in rows if row["kind"] == "offsets")
        return ConsumedPartition(
            records=records,
            beginning_offset=summary["beginning"],
            end_offset=summary["end"],
            offsets_for_times={
                row["timestamp"]: (
                    None if row["offset"] is None else (row["offset"], row["foundTimestamp"])
                )
                for row in summary["forTimes"]
            },
        )


# --- a replicated cluster -------------------------------------------------------------------

CONTROLLER_NODE_ID = 100  # apart from the brokers' ids 0..N-1
_DESCRIBED_LEADER = re.compile(r"Partition: (\d+)\s+Leader: (-?\d+)")


@dataclass
class KafkaCluster:
    """A KRaft cluster on loopback: ``broker_count`` brokers, each a ``KafkaBroker`` in its
    own JVM with its own dirs under ``workdir`` (``broker-N``), sharing one cluster id, and
    one controller. By default the controller is a JVM of its own (``controller``): it keeps
    the quorum out of the brokers, so a broker killed with SIGKILL is only a broker lost,
    its partitions moved when the controller fences it, after ``broker.session.timeout.ms``.
    With ``combined_controller`` broker 0 is the controller too (``broker,controller``), so
    N brokers are N JVMs, as a benchmark beside N tierlog brokers wants (with one broker,
    the single-node ``KafkaBroker``'s setup).

    ``broker_configs`` go to every broker (and to the controller, where the controller
    reads them, e.g. ``broker.session.timeout.ms``).
    """

    tools: KafkaTools
    workdir: Path
    broker_count: int = 3
    broker_configs: Mapping[str, str] = field(default_factory=dict)
    start_timeout_s: float = 120.0
    combined_controller: bool = False
    controller: KafkaBroker = field(init=False)
    brokers: list[KafkaBroker] = field(init=False)

    def __post_init__(self) -> None:
        cluster_id = _random_cluster_id()

        def node(node_id: int, directory: str, process_roles: str) -> KafkaBroker:
            return KafkaBroker(
                self.tools,
                self.workdir / directory,
                broker_configs=self.broker_configs,
                start_timeout_s=self.start_timeout_s,
                node_id=node_id,
                process_roles=process_roles,
                cluster_id=cluster_id,
            )

        if self.combined_controller:
            self.controller = node(0, "broker-0", "broker,controller")
        else:
            self.controller = node(CONTROLLER_NODE_ID, "controller", "controller")
        first = [self.controller] if self.combined_controller else []
        self.brokers = first + [
            node(node_id, f"broker-{node_id}", "broker")
            for node_id in range(len(first), self.broker_count)
        ]
        voters = f"{self.controller.node_id}@127.0.0.1:{self.controller.controller_port}"
        for member in self.nodes:
            member.controller_voters = voters

    @property
    def nodes(self) -> list[KafkaBroker]:
        """Every JVM of the cluster, the controller first."""
        return self.brokers if self.combined_controller else [self.controller, *self.brokers]

    @property
    def bootstrap_server(self) -> str:
        """Every broker, as clients list them in ``bootstrap.servers``."""
        return ",".join(broker.bootstrap_server for broker in self.brokers)

    def broker(self, node_id: int) -> KafkaBroker:
        return self.brokers[node_id]

    def start(self) -> Self:
        for member in self.nodes:
            member.start()
        return self

    def stop(self) -> None:
        """The brokers first, the controller last: a broker's controlled shutdown asks it."""
        for member in reversed(self.nodes):
            member.stop()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _topic_command(self, *args: str) -> str:
        return self.tools.run(
            "org.apache.kafka.tools.TopicCommand",
            "--bootstrap-server",
            self.bootstrap_server,
            *args,
        )

    def create_topic(
        self,
        topic: str,
        configs: Mapping[str, str] | None = None,
        *,
        partitions: int = 1,
        replication_factor: int | None = None,
    ) -> None:
        """``kafka-topics --create``; ``replication_factor`` None: every broker holds a replica."""
        factor = self.broker_count if replication_factor is None else replication_factor
        args = ["--create", "--topic", topic, "--partitions", str(partitions)]
        args += ["--replication-factor", str(factor)]
        for key, value in (configs or {}).items():
            args += ["--config", f"{key}={value}"]
        self._topic_command(*args)

    def leader(self, topic: str, partition: int = 0) -> int:
        """The partition's leader as ``kafka-topics --describe`` prints it (-1: none)."""
        described = self._topic_command("--describe", "--topic", topic)
        for match in _DESCRIBED_LEADER.finditer(described):
            if int(match[1]) == partition:
                return int(match[2])
        raise RuntimeError(f"no partition {partition} in:\n{described}")

    def live_broker(self) -> KafkaBroker:
        """A broker whose process runs (for clients that need one address)."""
        return next(broker for broker in self.brokers if broker.is_running)


# --- DumpLogSegments output -----------------------------------------------------------------
#
# What DumpLogSegments (Kafka 4.1.1, Scala ``kafka.tools.DumpLogSegments``) prints, per
# file, on stdout:
#   Dumping <path>
#   .log:       Log starting offset: <n>
#               baseOffset: .. lastOffset: .. count: .. position: .. CreateTime: .. crc: ..
#               | offset: .. CreateTime: .. keySize: .. valueSize: .. sequence: ..
#                 headerKeys: [a,b] key: <utf-8> payload: <utf-8>     (deep iteration)
#               Found <n> invalid bytes at the end of <name>
#   .index:     offset: <n> position: <n>          | <path> is empty. | <path> passed sanity check.
#   .timeindex: timestamp: <ms> offset: <n>        | <path> passed sanity check.
# and its findings on stderr, after all files: "Mismatches in :<path>" (an .index entry
# whose position does not start a batch ending at its offset), "Found timestamp mismatch
# in :<path>" (a .timeindex timestamp that is not the max timestamp of the batch ending
# at its offset), "Found out of order timestamp in :<path>", "The following indexed
# offsets are not found in the log.", "Non-consecutive offsets in <path>", each followed
# by indented detail lines. The process exits 0 with findings; a failed sanity check
# throws (CorruptIndexException), exits non-zero, and stops at that file.

_FIELD = re.compile(r"(\w+): (\S+)")
_RECORD_PREFIX = "| "
_ERROR_HEADERS = (
    "Mismatches in :",
    "Found timestamp mismatch in :",
    "Found out of order timestamp in :",
    "The following indexed offsets are not found in the log.",
    "Non-consecutive offsets in ",
)
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime", "NoTimestampType")


def _fields(text: str) -> dict[str, str]:
    return dict(_FIELD.findall(text))


def _timestamp(fields: Mapping[str, str]) -> tuple[str, int]:
    for timestamp_type in _TIMESTAMP_TYPES:
        if timestamp_type in fields:
            return timestamp_type, int(fields[timestamp_type])
    raise ValueError(f"no timestamp in {fields}")


@dataclass(frozen=True)
class RecordEntry:
    """One record of a batch (deep iteration). ``key``/``payload`` need --print-data-log
    and are decoded as UTF-8 text; ``None`` when the record has none (size -1)."""

    offset: int
    timestamp_type: str
    timestamp_ms: int
    key_size: int
    value_size: int
    sequence: int
    header_keys: tuple[str, ...]
    key: str | None
    payload: str | None

    @classmethod
    def parse(cls, line: str) -> RecordEntry:
        metadata, _, data = line.partition(" headerKeys: [")
        header_text, _, data = data.partition("]")
        fields = _fields(metadata)
        timestamp_type, timestamp_ms = _timestamp(fields)
        key_size, value_size = int(fields["keySize"]), int(fields["valueSize"])
        key = payload = None
        # " key: K payload: P"; the key ends at the first " payload: " (tests keep it out of keys)
        data = data.removeprefix(" ")
        if data.startswith("key: "):
            key, _, rest = data[len("key: ") :].partition(" payload: ")
            payload = rest if value_size >= 0 and " payload: " in data else None
        elif data.startswith("payload: "):
            payload = data[len("payload: ") :]
        return cls(
            offset=int(fields["offset"]),
            timestamp_type=timestamp_type,
            timestamp_ms=timestamp_ms,
            key_size=key_size,
            value_size=value_size,
            sequence=int(fields.get("sequence", "-1")),
            header_keys=tuple(header_text.split(",")) if header_text else (),
            key=key,
            payload=payload,
        )


@dataclass(frozen=True)
class BatchEntry:
    """One batch (v2) or shallow message (v0/v1) as DumpLogSegments lists it."""

    base_offset: int
    last_offset: int
    count: int | None
    position: int
    timestamp_type: str
    max_timestamp_ms: int
    size: int
    magic: int
    compression: str
    crc: int
    is_valid: bool
    producer_id: int
    producer_epoch: int
    base_sequence: int
    partition_leader_epoch: int
    is_transactional: bool
    is_control: bool
    records: list[RecordEntry] = field(default_factory=list, compare=False)

    @classmethod
    def parse(cls, line: str) -> BatchEntry:
        fields = _fields(line)
        timestamp_type, max_timestamp_ms = _timestamp(fields)
        last_offset = int(fields.get("lastOffset", fields.get("offset", "-1")))
        count = fields.get("count")
        return cls(
            base_offset=int(fields.get("baseOffset", last_offset)),
            last_offset=last_offset,
            count=int(count) if count not in (None, "null") else None,
            position=int(fields["position"]),
            timestamp_type=timestamp_type,
            max_timestamp_ms=max_timestamp_ms,
            size=int(fields["size"]),
            magic=int(fields["magic"]),
            compression=fields["compresscodec"],
            crc=int(fields["crc"]),
            is_valid=fields["isvalid"] == "true",
            producer_id=int(fields.get("producerId", "-1")),
            producer_epoch=int(fields.get("producerEpoch", "-1")),
            base_sequence=int(fields.get("baseSequence", "-1")),
            partition_leader_epoch=int(fields.get("partitionLeaderEpoch", "-1")),
            is_transactional=fields.get("isTransactional") == "true",
            is_control=fields.get("isControl") == "true",
        )


@dataclass(frozen=True)
class IndexEntry:
    """An .index entry: the last offset of a batch, and the file position where it starts."""

    offset: int
    position: int


@dataclass(frozen=True)
class TimeIndexEntry:
    """A .timeindex entry: a batch's max timestamp, and the offset it was indexed at."""

    timestamp_ms: int
    offset: int


@dataclass
class FileDump:
    """What DumpLogSegments printed for one file."""

    path: Path
    start_offset: int | None = None
    batches: list[BatchEntry] = field(default_factory=list)
    index_entries: list[IndexEntry] = field(default_factory=list)
    time_index_entries: list[TimeIndexEntry] = field(default_factory=list)
    is_empty: bool = False
    passed_sanity_check: bool = False
    other_lines: list[str] = field(default_factory=list)  # .snapshot / .txnindex contents

    @property
    def records(self) -> list[RecordEntry]:
        return [record for batch in self.batches for record in batch.records]


@dataclass
class DumpOutput:
    """Parsed DumpLogSegments output. ``errors`` holds every finding, one per line,
    each prefixed with its section header (e.g. ``"Mismatches in :/x/0.index  Index
    offset: 5, log offset: 7"``), plus anything printed that was not understood."""

    files: list[FileDump] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""

    def file(self, name: str | Path) -> FileDump:
        """The dump of the file with this name (or path)."""
        wanted = Path(name).name
        for dump in self.files:
            if dump.path.name == wanted:
                return dump
        raise KeyError(f"{wanted} not in the dump of {[dump.path.name for dump in self.files]}")

    @property
    def batches(self) -> list[BatchEntry]:
        return [batch for dump in self.files for batch in dump.batches]

    @property
    def records(self) -> list[RecordEntry]:
        return [record for dump in self.files for record in dump.records]

    def extend(self, other: DumpOutput) -> None:
        self.files += other.files
        self.errors += other.errors
        self.stdout += other.stdout
        self.stderr += other.stderr


def _parse_file_line(dump: FileDump, line: str, errors: list[str]) -> None:
    suffix = dump.path.suffix
    if line.startswith(_RECORD_PREFIX) and dump.batches:
        dump.batches[-1].records.append(RecordEntry.parse(line[len(_RECORD_PREFIX) :]))
    elif line.startswith("Log starting offset: "):
        dump.start_offset = int(line.rsplit(" ", 1)[1])
    elif line.startswith("baseOffset: ") or (suffix == ".log" and line.startswith("offset: ")):
        dump.batches.append(BatchEntry.parse(line))
    elif suffix == ".index" and line.startswith("offset: "):
        fields = _fields(line)
        dump.index_entries.append(IndexEntry(int(fields["offset"]), int(fields["position"])))
    elif suffix == ".timeindex" and line.startswith("timestamp: "):
        fields = _fields(line)
        entry = TimeIndexEntry(int(fields["timestamp"]), int(fields["offset"]))
        dump.time_index_entries.append(entry)
    elif line.endswith(" is empty."):
        dump.is_empty = True
    elif line.endswith(" passed sanity check."):
        dump.passed_sanity_check = True
    elif line.startswith("Found ") and " invalid bytes at the end of " in line:
        errors.append(line)
    elif suffix in (".snapshot", ".txnindex"):
        dump.other_lines.append(line)
    else:
        errors.append(f"unparsed output for {dump.path.name}: {line}")


def parse_dump(stdout: str, stderr: str = "") -> DumpOutput:
    """Parse DumpLogSegments' stdout (the dumps) and stderr (its findings)."""
    output = DumpOutput(stdout=stdout, stderr=stderr)
    current: FileDump | None = None
    for line in stdout.splitlines():
        if not line.strip():
            continue
        if line.startswith("Dumping "):
            current = FileDump(path=Path(line[len("Dumping ") :]))
            output.files.append(current)
        elif current is None:
            output.errors.append(f"output before any file: {line}")
        else:
            _parse_file_line(current, line, output.errors)
    header = ""
    for line in stderr.splitlines():
        if not line.strip():
            continue
        if line.startswith(_ERROR_HEADERS):
            header = line
        elif header and (line.startswith("  ") or line.startswith("Indexed offset: ")):
            output.errors.append(f"{header}  {line.strip()}")
        else:
            header = ""
            output.errors.append(line)
    return output
