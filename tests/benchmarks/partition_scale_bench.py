"""Issue 32's cluster figures: 3 tierlog brokers beside 3 Kafka 4.1.1 brokers as the
partition count grows.

Run from the repository root (needs the Kafka jars in ``.cache``)::

    .venv/bin/python -m tests.benchmarks.partition_scale_bench --partitions 500 2000 --runs 3

For each N of ``--partitions``, two fresh clusters of 3 brokers on loopback: tierlog's
(``tierlog cluster up --brokers 3``, on fixed ports so that brokers come back where
clients look for them) and Kafka's (the interop harness's KRaft ``KafkaCluster``, broker 0
the controller too), each with one topic of N partitions of replication factor 3. Every
client request is kafka-python's (tierlog through its Kafka listeners), so the one client
measures both. Then ``--runs`` rounds, the two systems interleaved in each step:

- *idle*: CPU seconds per minute of each broker over ``--idle-seconds`` with no client,
  and its resident memory (``VmRSS``) at the end; mean per broker;
- *scrape*: one ``/metrics`` of broker 0 (tierlog): bytes and seconds. Kafka has no
  HTTP metrics endpoint (JMX only, an exporter is a separate agent): no figure;
- *metadata*: one Metadata request for the topic (its N partitions) from an admin
  client already connected: the median of ``--metadata-requests``;
- *clean start*: every broker stopped with SIGTERM (a clean shutdown), then all started
  at once: seconds from the start to *ready*;
- *start after kill -9*: every broker killed, then all started at once: the same;
- *kill -9 of broker 2* (never Kafka's broker 0, which is its controller): first a
  preferred-leader election (ElectLeaders, not timed) gives broker 2 its third of the
  leaderships (after a restart the broker up first leads most); then seconds from the
  kill until one Metadata response from a survivor gives every partition a leader other
  than broker 2 ("led again": the looks ask brokers 0 and 1 in turn, by node id, never
  broker 2, which both systems still list until it is fenced), and until every partition
  accepts an ``acks=all`` record again ("writable": a new producer bootstrapped on the
  survivors, left as any client is: it asks any broker it knows for Metadata, broker 2
  included while it still answers, and sends each record to the leader named); then
  broker 2 comes back (not timed). Both clocks start at the signal itself, and a look's
  answer counts when its last byte is read, before the bench decodes it (decoding is
  the bench's CPU, not the broker's); the step prints its timeline: the signal's
  wall-clock time (to line up with the brokers' logs) and each look's node, times and
  verdict;
- *SIGTERM of broker 2*: the same with a controlled shutdown (timed from the signal;
  the broker may still be closing its logs), then broker 2 comes back and, once ready, seconds until
  ElectLeaders has given every partition back to its preferred replica ("back to
  preferred": Kafka's own rebalance waits ``leader.imbalance.check.interval.seconds``,
  300 s, so both are asked).

``--steps`` measures only some of these (e.g. ``--steps kill-one stop-one``).

While one system's scrape, Metadata and lose-one-broker figures are taken, the other is
sidelined (``side_by_side.sidelined``: lowest CPU priority, still running);
``--rivals-compete`` leaves it at its normal priority.

``--light-load R``: the issue's "then with a light load spread over all partitions".
While each system's idle, scrape, Metadata and lose-one-broker figures are taken, a
thread of this process sends it ``R`` records a second (100 bytes each, ``acks=1``),
round-robin over the N partitions; *idle CPU* is then the brokers' CPU under that load.
The two whole-cluster restarts run without it (there is nobody to send to).

*Ready* means the same on both: one Metadata response names a leader for every one of the N
partitions, among the brokers it lists, and then one record sent to every partition with
``acks=all`` is acknowledged (the producer retrying until it is). The clock runs from the
first process's spawn (or the kill) to the last acknowledgement, so it includes the
client's own reconnect back-off, which is the same for both.

Prints the machine line, the medians in a markdown table (and each run's figures), and
writes ``--svg`` (each figure against N; no matplotlib in the venv: drawn by
``tests.benchmarks.scale_plot``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import queue
import random
import signal
import socket
import statistics
import struct
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kafka import KafkaAdminClient, KafkaProducer
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from tests.benchmarks.kafka_comparison_bench import progress
from tests.benchmarks.scale_plot import Series, write_svg
from tests.benchmarks.scratch import machine_line, run_in_scratch
from tests.benchmarks.side_by_side import (
    clusters,
    process_usage,
    resident_bytes,
    sidelined_unless,
)
from tests.interop.kafka import KafkaCluster, KafkaTools
from tierlog.cli.local_cluster import (
    read_cluster,
    start_broker,
    start_cluster,
    stop_broker,
    stop_cluster,
)
from tierlog.cli.loopback_ports import ephemeral_start
from tierlog.tools.progress import Advance, choose_tracker

TOPIC = "scale"
BROKERS = 3
VICTIM = 2  # Kafka's broker 0 is its controller: killing it stops every election
START_TIMEOUT_S = 900.0
READY_TIMEOUT_S = 900.0
PREFERRED_WAIT_S = 120.0
CREATE_TIMEOUT_MS = 600_000
# Between two looks at the leaders while a broker is lost (each look one Metadata request
# of the N partitions on a connected client): fine enough that the clock measures the
# brokers, not the look (a new admin client every 0.2 s blurred both systems' figures
# by about half a second).
POLL_S = 0.05
LIGHT_LOAD_TICK_S = 0.05
LIGHT_LOAD_CLOSE_S = 30.0  # beyond the load's delivery timeout
LOOK_TIMEOUT_MS = 5_000  # a look at a broker that went away is given up, not waited on
# The looks' Metadata version: the newest, which kafka-python's own clients negotiate
# with both systems. A version no client asked before costs a tierlog broker, at its
# first answer, the import of its schema and every partition encoded afresh, on its
# event loop (seen in a profiled scratch run, mid-hand-over, with v12).
METADATA_VERSION = 13
TIERLOG, KAFKA = "tierlog", "Kafka"
FIGURES = (
    "clean start s",
    "start after kill -9 s",
    "kill -9 of 1 broker: led again s",
    "kill -9 of 1 broker: writable s",
    "SIGTERM of 1 broker: led again s",
    "SIGTERM of 1 broker: writable s",
    "back to preferred leaders s",
    "idle CPU s/min per broker",
    "RSS MB per broker",
    "/metrics bytes",
    "/metrics ms",
    "Metadata of N partitions ms",
)
# Each round's steps, in order (``--steps`` picks some).
STEPS = ("idle", "scrape", "metadata", "clean-start", "kill-all", "kill-one", "stop-one")


class Brokers(Protocol):
    """One system's 3 brokers as the benchmark drives them."""

    name: str

    @property
    def bootstrap(self) -> str: ...

    @property
    def pids(self) -> list[int]: ...

    def stop_all(self) -> None: ...

    def kill_all(self) -> None: ...

    def start_all(self) -> None: ...

    def kill(self, node_id: int) -> None: ...

    def stop(self, node_id: int) -> None: ...

    def start(self, node_id: int) -> None: ...

    def scrape(self) -> tuple[int, float] | None: ...


@dataclass
class TierlogCluster:
    directory: Path
    base_port: int
    name: str = TIERLOG

    @property
    def bootstrap(self) -> str:
        return read_cluster(self.directory).kafka_bootstrap

    @property
    def pids(self) -> list[int]:
        return [b.pid for b in read_cluster(self.directory).brokers if b.pid is not None]

    def stop_all(self) -> None:
        stop_cluster(self.directory, grace_s=START_TIMEOUT_S)

    def kill_all(self) -> None:
        for node_id in range(BROKERS):
            self.kill(node_id)

    def start_all(self) -> None:
        """As ``tierlog cluster up`` does: all spawned at once, back when all are ready."""
        start_cluster(
            self.directory, BROKERS, base_port=self.base_port, ready_timeout_s=START_TIMEOUT_S
        )

    def kill(self, node_id: int) -> None:
        stop_broker(self.directory, node_id, signum=signal.SIGKILL)

    def stop(self, node_id: int) -> None:
        stop_broker(self.directory, node_id, grace_s=START_TIMEOUT_S)

    def start(self, node_id: int) -> None:
        start_broker(self.directory, node_id, ready_timeout_s=START_TIMEOUT_S)

    def scrape(self) -> tuple[int, float]:
        address = read_cluster(self.directory).brokers[0].metrics_address
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=120) as response:
            size = len(response.read())
        return size, time.perf_counter() - started


@dataclass
class KafkaBrokers:
    cluster: KafkaCluster
    name: str = KAFKA

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_server

    @property
    def pids(self) -> list[int]:
        return [broker.pid for broker in self.cluster.brokers if broker.is_running]

    def stop_all(self) -> None:
        self.cluster.stop()

    def kill_all(self) -> None:
        for broker in self.cluster.brokers:
            broker.kill()

    def start_all(self) -> None:
        """Every JVM spawned at once (``KafkaCluster.start`` waits for each in turn), back
        when each has logged that it started."""
        with ThreadPoolExecutor(BROKERS) as pool:
            list(pool.map(lambda broker: broker.start(), self.cluster.brokers))

    def kill(self, node_id: int) -> None:
        self.cluster.broker(node_id).kill()

    def stop(self, node_id: int) -> None:
        self.cluster.broker(node_id).stop(timeout_s=START_TIMEOUT_S)

    def start(self, node_id: int) -> None:
        self.cluster.broker(node_id).start()

    def scrape(self) -> None:
        return None  # JMX only


# --- what a Kafka client sees -----------------------------------------------------------


@contextlib.contextmanager
def admin_client(bootstrap: str, timeout_ms: int = 30_000) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms)
    try:
        yield admin
    finally:
        admin.close()


def topic_leaders(topics: list[dict[str, Any]]) -> dict[int, int]:
    """Each partition's leader in one Metadata response's topics, ours the only one asked
    for (-1: none, or none listed)."""
    (topic,) = topics
    return {p["partition_index"]: p["leader_id"] for p in topic["partitions"]}


def leaders(admin: KafkaAdminClient) -> dict[int, int]:
    """Each partition's leader in one Metadata response from any broker."""
    return topic_leaders(admin.describe_topics([TOPIC]))


class Looks(Protocol):
    """Looks at every partition's leader, each one Metadata request."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def last_asked(self) -> int | None:
        """The node id the last look asked, where the looks choose it (else None)."""

    @property
    def last_sent(self) -> float | None:
        """When the last look was sent (``time.monotonic()``), where the looks send it
        apart from ``look`` (else None: ``look``'s call is the send)."""

    @property
    def last_answered(self) -> float | None:
        """When the last look's answer was read whole (``time.monotonic()``), before it
        was decoded, where the looks know it (else None)."""

    def look(self) -> dict[int, int] | None:
        """The next look's answer: each partition's leader, or None without one. Looks
        come at most every ``POLL_S``."""


class LeaderLooks:
    """Looks at every partition's leader from one admin client, connected once and kept
    (made again only after a look fails: the broker it asked went away). A look is then
    one Metadata request, so looks can come every ``POLL_S``. The admin client asks its
    least loaded broker, any the cluster lists: right while every broker is wanted."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.last_asked: int | None = None  # the admin client's choice, not recorded
        self.last_sent: float | None = None  # the call is the send
        self.last_answered: float | None = None  # not known apart from its decoding
        self._admin: KafkaAdminClient | None = None
        self._next_look = 0.0

    def look(self) -> dict[int, int] | None:
        """Each partition's leader, or None while no broker answers."""
        time.sleep(max(self._next_look - time.monotonic(), 0.0))
        try:
            if self._admin is None:
                self._admin = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap, request_timeout_ms=LOOK_TIMEOUT_MS
                )
            return leaders(self._admin)
        except Exception:  # a broker still starting or just gone: connect again
            self.close()
            return None
        finally:
            self._next_look = time.monotonic() + POLL_S

    def __enter__(self) -> LeaderLooks:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
            self._admin = None


class SurvivorLooks:
    """Looks at every partition's leader that ask only the brokers ``nodes``, in turn: each
    look one Metadata request to the next of them, on a connection made before the first.

    Not the admin client: kafka-python closes the bootstrap connection once it has the
    cluster's metadata and sends each request to its least loaded broker among all those
    that metadata lists, and a broker being stopped stays listed (by Kafka until it is
    fenced, by tierlog until its lease expires): a scratch run found every look asking
    it. So each look is a plain socket's request to a node id of our choosing (its
    address from kafka-python's bootstrap), encoded and decoded by kafka-python's
    protocol classes.

    An answer is timed when its last byte is read (``last_answered``), before it is
    decoded: kafka-python decodes 2,000 partitions in pure Python (10-30 ms of CPU, and
    its ``to_dict`` as much again), and with the brokers' own work after a signal
    saturating the machine's 2 cores, a packet capture of the bench (docs/BENCHMARKS.md,
    issue 32's "where led again's time goes") found its looks done 0.26-2.25 s after the
    survivor's whole answer was in their socket, in both systems' turns: the figure was
    then the bench's own CPU, not the brokers'.

    For the same reason the looks are sent and read by a thread of their own, every
    ``POLL_S`` after the last answer, while ``look`` has them decoded in order by a
    process of their own: a decoding slowed by the signal's load (0.59 s for one answer
    of 2,000 partitions, docs/BENCHMARKS.md "SIGTERM at 2,000: the looks freed of the
    bench's own decoding") no longer holds the next look back. In this process it did,
    even from another thread: one look waited 0.33 s for the GIL the decoding held,
    while the machine's two cores were busy with the brokers."""

    def __init__(self, bootstrap: str, nodes: Sequence[int]) -> None:
        self.bootstrap = bootstrap
        self._addresses = node_addresses(bootstrap, nodes)
        self._sockets: dict[int, socket.socket] = {}
        self._correlation_ids = itertools.count()
        self._nodes = itertools.cycle(nodes)
        self._answers: queue.Queue[_Answer] = queue.Queue()
        self._stop = threading.Event()
        self._asker = threading.Thread(target=self._ask_on, name="survivor-looks", daemon=True)
        self._decoder = ProcessPoolExecutor(1)
        self.last_asked: int | None = None
        self.last_sent: float | None = None
        self.last_answered: float | None = None
        try:
            self._decoder.submit(int).result()  # forked now, before the clock and the thread
            for node_id in nodes:
                self._connection(node_id)
        except Exception:
            self.close()
            raise

    def look(self) -> dict[int, int] | None:
        """Each partition's leader as the next node sees it, or None if it did not answer
        within ``LOOK_TIMEOUT_MS`` (connected again at the next look). The first call
        starts the looks."""
        if self._asker.ident is None:
            self._asker.start()
        answer = self._next_answer()
        self.last_asked, self.last_sent, self.last_answered = answer.node, answer.sent, None
        if answer.body is None:
            return None
        self.last_answered = answer.answered
        return self._decoder.submit(_leaders_in, answer.body).result()

    def _next_answer(self) -> _Answer:
        while True:
            try:
                return self._answers.get(timeout=POLL_S)
            except queue.Empty:
                if not self._asker.is_alive():  # its error is on stderr
                    raise RuntimeError("the looks' thread stopped") from None

    def _ask_on(self) -> None:
        """Until closed: a look to the next node, its answer (None: none) queued."""
        while not self._stop.is_set():
            node_id, sent = next(self._nodes), time.monotonic()
            try:
                body: bytearray | None = self._ask(node_id)
            except OSError:  # refused, reset, timed out: this connection is done
                body = None
                with contextlib.suppress(OSError):
                    self._sockets.pop(node_id).close()
            self._answers.put(_Answer(node_id, sent, time.monotonic(), body))
            self._stop.wait(POLL_S)

    def _ask(self, node_id: int) -> bytearray:
        """The answer's bytes (its header and body)."""
        connection = self._connection(node_id)
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
            allow_auto_topic_creation=False,
        )
        request.with_header(correlation_id=next(self._correlation_ids), client_id="scale-bench")
        connection.sendall(request.encode(version=METADATA_VERSION, header=True, framed=True))
        (size,) = struct.unpack(">i", _read_exactly(connection, 4))
        return _read_exactly(connection, size)

    def _connection(self, node_id: int) -> socket.socket:
        connection = self._sockets.get(node_id)
        if connection is None:
            connection = socket.create_connection(
                self._addresses[node_id], timeout=LOOK_TIMEOUT_MS / 1000
            )
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets[node_id] = connection
        return connection

    def __enter__(self) -> SurvivorLooks:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._asker.is_alive():
            self._asker.join()
        self._decoder.shutdown()
        for connection in self._sockets.values():
            connection.close()
        self._sockets.clear()


def _leaders_in(answer: bytearray) -> dict[int, int]:
    """Each partition's leader in a Metadata answer (its header and body) of ``TOPIC``."""
    response = MetadataResponse.decode(answer, version=METADATA_VERSION, header=True)
    (topic,) = response.topics
    return {p.partition_index: p.leader_id for p in topic.partitions}


@dataclass(frozen=True)
class _Answer:
    """One look of ``SurvivorLooks``' thread: the node asked, when it was sent and its
    answer read whole (``time.monotonic()``), and the answer's bytes (None: none)."""

    node: int
    sent: float
    answered: float
    body: bytearray | None


def node_addresses(bootstrap: str, nodes: Sequence[int]) -> dict[int, tuple[str, int]]:
    """Each of ``nodes``' address, as the cluster's Metadata lists it."""
    client = KafkaNetClient(bootstrap_servers=bootstrap, request_timeout_ms=LOOK_TIMEOUT_MS)
    try:
        client.check_version(timeout_ms=LOOK_TIMEOUT_MS)  # the cluster's metadata too
        brokers = {node_id: client.cluster.broker_metadata(node_id) for node_id in nodes}
    finally:
        client.close()
    missing = [node_id for node_id, broker in brokers.items() if broker is None]
    if missing:
        raise RuntimeError(f"{bootstrap} lists no broker {missing}")
    return {node_id: (broker.host, broker.port) for node_id, broker in brokers.items()}


def _read_exactly(connection: socket.socket, size: int) -> bytearray:
    data = bytearray(size)
    view, received = memoryview(data), 0
    while received < size:
        got = connection.recv_into(view[received:])
        if not got:
            raise ConnectionResetError("the broker closed the connection")
        received += got
    return data


@dataclass(frozen=True)
class Look:
    """One look of ``wait_led`` (``time.monotonic()``): when it was sent, its answer read
    whole (None: not known apart from its decoding) and decoded; the node asked (None:
    the client chose); and what the answer said: how many partitions ``not_by`` still
    led, how many had no leader or were missing (both None: no answer)."""

    sent: float
    answered: float | None
    decoded: float
    node: int | None
    led_by_not_by: int | None
    leaderless: int | None

    def line(self, since: float) -> str:
        """The look in seconds after ``since``."""
        asked = f"node {self.node}" if self.node is not None else "a node"
        answered = "" if self.answered is None else f" answered {self.answered - since:+.3f},"
        if self.led_by_not_by is None:
            verdict = "no answer"
        else:
            verdict = f"{self.led_by_not_by} still led by it, {self.leaderless} leaderless"
        return (
            f"{asked} sent {self.sent - since:+.3f},{answered} decoded "
            f"{self.decoded - since:+.3f} s: {verdict}"
        )


def wait_led(
    looks: Looks,
    partitions: int,
    not_by: int | None,
    deadline: float,
    record: list[Look] | None = None,
) -> float:
    """Until one Metadata response gives every partition a leader (other than ``not_by``);
    when that response was read whole (``time.monotonic()``; when it was decoded, where
    the looks do not know). Each look is appended to ``record``."""
    while time.monotonic() < deadline:
        called = time.monotonic()
        led = looks.look()
        decoded = time.monotonic()
        sent = called if looks.last_sent is None else looks.last_sent
        answered = looks.last_answered if led is not None else None
        by_not_by = leaderless = None
        if led is not None:
            by_not_by = sum(1 for leader in led.values() if leader == not_by)
            leaderless = partitions - len(led) + sum(1 for leader in led.values() if leader < 0)
        if record is not None:
            record.append(Look(sent, answered, decoded, looks.last_asked, by_not_by, leaderless))
        if by_not_by == 0 and leaderless == 0:
            return decoded if answered is None else answered
    raise TimeoutError(f"partitions of {looks.bootstrap} not all led by the deadline")


def _note_signal(event: str, _args: tuple[Any, ...]) -> None:
    if event == "os.kill":
        SIGNALS_SENT.setdefault(threading.get_ident(), (time.time(), time.monotonic()))


# When each thread of this process first sent a signal (``os.kill``; wall clock, to line
# up with the brokers' logs, and monotonic): the moment a system's ``stop`` actually
# signals its broker, after what it does first (tierlog's ``stop_broker`` takes the
# cluster record's file lock and reads it, 1-13 ms in scratch runs; Kafka's
# ``Popen.send_signal`` calls ``os.kill`` too). Seen through the audit event, so both
# systems' own stop code runs as it is.
SIGNALS_SENT: dict[int, tuple[float, float]] = {}
sys.addaudithook(_note_signal)


def wall(moment: float) -> str:
    """``moment`` (``time.time()``) as the brokers' logs write it (local time)."""
    return time.strftime("%H:%M:%S", time.localtime(moment)) + f",{int(moment * 1000) % 1000:03d}"


def produce_everywhere(bootstrap: str, partitions: int, deadline: float) -> None:
    """One record to every partition with acks=all, each retried until acknowledged."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        request_timeout_ms=30_000,
        delivery_timeout_ms=int(READY_TIMEOUT_S * 1000),
        max_block_ms=int(READY_TIMEOUT_S * 1000),
    )
    try:
        pending = list(range(partitions))
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} partitions of {bootstrap} not writable")
            futures = {p: producer.send(TOPIC, b"ready", partition=p) for p in pending}
            producer.flush()
            pending = [p for p, future in futures.items() if future.failed()]
    finally:
        producer.close()


class LightLoad:
    """``rate`` records a second to ``bootstrap``, round-robin over its ``partitions``,
    from a thread, until the block is left; a record that fails is counted, not retried
    (a broker lost mid-step fails some, as it would a real producer's)."""

    def __init__(self, bootstrap: str, partitions: int, rate: float) -> None:
        self.bootstrap, self.partitions, self.rate = bootstrap, partitions, rate
        self.sent = self.failed = 0
        self._error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send, name="light-load", daemon=True)

    def __enter__(self) -> LightLoad:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._error is not None:  # no figure is labelled loaded that was not
            raise RuntimeError(f"the light load on {self.bootstrap} stopped") from self._error

    def _send(self) -> None:
        try:
            self._send_until_stopped()
        except Exception as error:  # raised again by the block's end
            self._error = error

    def _send_until_stopped(self) -> None:
        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks=1,
            linger_ms=5,
            retries=0,
            max_block_ms=LOOK_TIMEOUT_MS,
            # A record a lost broker held fails within seconds (counted), so that the
            # close at the step's end has nothing left to wait for.
            request_timeout_ms=2_000,
            delivery_timeout_ms=5_000,
        )
        value = bytes(100)
        partition = 0
        started = time.monotonic()
        try:
            while not self._stop.is_set():
                due = int((time.monotonic() - started) * self.rate) - self.sent
                for _ in range(due):
                    future = producer.send(TOPIC, value, partition=partition)
                    future.add_errback(self._count_failure)
                    partition = (partition + 1) % self.partitions
                    self.sent += 1
                self._stop.wait(LIGHT_LOAD_TICK_S)
        finally:
            producer.close(timeout=LIGHT_LOAD_CLOSE_S)

    def _count_failure(self, _error: Exception) -> None:
        self.failed += 1


def loaded(
    brokers: Brokers, partitions: int, rate: float
) -> contextlib.AbstractContextManager[object]:
    """``brokers`` under ``--light-load`` while the block runs (nothing when it is 0)."""
    if not rate:
        return contextlib.nullcontext()
    return LightLoad(brokers.bootstrap, partitions, rate)


def wait_ready(bootstrap: str, partitions: int, deadline: float) -> None:
    with LeaderLooks(bootstrap) as looks:
        wait_led(looks, partitions, None, deadline)
    produce_everywhere(bootstrap, partitions, deadline)


def create_topic(bootstrap: str, partitions: int) -> None:
    # A loaded machine (load average 20) took over 30 s to create 2,000 partitions' logs.
    with admin_client(bootstrap, timeout_ms=CREATE_TIMEOUT_MS) as admin:
        admin.create_topics(
            {TOPIC: {"num_partitions": partitions, "replication_factor": BROKERS}},
            timeout_ms=CREATE_TIMEOUT_MS,
        )
    wait_ready(bootstrap, partitions, time.monotonic() + READY_TIMEOUT_S)


def elect_preferred(bootstrap: str) -> int:
    """Give partitions back to their preferred (first) replicas (ElectLeaders), so that
    ``VICTIM`` leads its third of them: after a restart the broker up first leads most
    (Kafka moves them back only at ``leader.imbalance.check.interval.seconds``, 300 s).
    How many ``VICTIM`` leads once one Metadata response shows each preferred replica
    leading (or ``PREFERRED_WAIT_S`` went by)."""
    with admin_client(bootstrap) as admin:
        (topic,) = admin.describe_topics([TOPIC])
        preferred = {p["partition_index"]: p["replica_nodes"][0] for p in topic["partitions"]}
        deadline = time.monotonic() + PREFERRED_WAIT_S
        while (led := leaders(admin)) != preferred and time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # "already the leader" for some
                admin.elect_leaders(0, [TOPIC], raise_errors=False)
            time.sleep(1)
        return sum(1 for leader in led.values() if leader == VICTIM)


# --- the figures ------------------------------------------------------------------------


def timed(action: Callable[[], object]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def restart(brokers: Brokers, partitions: int, stop: Callable[[], None]) -> float:
    """Seconds from starting every broker (after ``stop``) to ready."""
    stop()

    started = time.monotonic()
    brokers.start_all()
    up = time.monotonic() - started
    wait_ready(brokers.bootstrap, partitions, time.monotonic() + READY_TIMEOUT_S)
    ready = time.monotonic() - started
    progress(f"{partitions}: {brokers.name} processes up in {up:.1f} s, ready in {ready:.1f} s")
    return ready


def lose_one(
    brokers: Brokers, partitions: int, stop: Callable[[int], None]
) -> tuple[float, float, float]:
    """Seconds from stopping ``VICTIM`` (leading its preferred partitions) with ``stop``
    until its partitions are led again and until every partition is writable; then it
    comes back, and the seconds from its return (ready) until ElectLeaders has given
    every partition back to its preferred replica."""
    bootstrap = brokers.bootstrap
    victim_led = elect_preferred(bootstrap)
    progress(f"{partitions}: {brokers.name} broker {VICTIM} leads {victim_led} partitions")
    survivor_ids = [n for n in range(BROKERS) if n != VICTIM]
    survivors = ",".join(bootstrap.split(",")[n] for n in survivor_ids)
    # The clocks run from the signal, not from the process's end: a stopping broker hands
    # its leaderships over first and closes its logs after (2,000 of them took 38 s).
    # The clocks start at the signal itself (seen by ``SIGNALS_SENT``), not at the call.
    stopping = threading.Thread(target=stop, args=(VICTIM,))
    record: list[Look] = []
    with SurvivorLooks(survivors, survivor_ids) as looks:  # connected before the clock
        called = time.monotonic()
        stopping.start()
        deadline = called + READY_TIMEOUT_S
        seen = wait_led(looks, partitions, VICTIM, deadline, record)
    wall_signalled, started = SIGNALS_SENT.get(stopping.ident or 0, (time.time(), called))
    led_again = seen - started
    produce_everywhere(survivors, partitions, deadline)
    writable = time.monotonic() - started
    stopping.join()
    SIGNALS_SENT.pop(stopping.ident or 0, None)
    timeline(f"{partitions}: {brokers.name}", wall_signalled, started, called, record)
    brokers.start(VICTIM)
    wait_ready(bootstrap, partitions, time.monotonic() + READY_TIMEOUT_S)
    back = time.monotonic()
    victim_led = elect_preferred(bootstrap)
    preferred = time.monotonic() - back
    progress(f"{partitions}: {brokers.name} broker {VICTIM} leads {victim_led} again")
    return led_again, writable, preferred


def timeline(
    label: str, wall_signalled: float, signalled: float, called: float, record: list[Look]
) -> None:
    """The losing step's timeline, printed once it is over: the signal's wall clock (as
    the brokers' logs write it), then in seconds after it the stop's call and each look."""
    progress(
        f"{label} timeline: signal sent {wall(wall_signalled)}, the stop called "
        f"{called - signalled:+.3f} s; {len(record)} looks:"
    )
    for look in record:
        progress(f"{label}   look {look.line(signalled)}")


def idle(brokers: Brokers, seconds: float) -> tuple[float, float]:
    """CPU seconds per minute and resident MB, each a mean per broker, over ``seconds``."""
    pids = brokers.pids
    before = [process_usage(pid).cpu_s for pid in pids]
    time.sleep(seconds)
    after = [process_usage(pid).cpu_s for pid in pids]
    cpu = statistics.mean(b - a for a, b in zip(before, after, strict=True)) * 60 / seconds
    return cpu, statistics.mean(resident_bytes(pid) for pid in pids) / 1e6


def metadata_ms(bootstrap: str, requests: int) -> float:
    with admin_client(bootstrap) as admin:
        leaders(admin)  # connected, versions negotiated
        return 1000 * statistics.median(timed(lambda: leaders(admin)) for _ in range(requests))


@dataclass
class Readings:
    """Every run's value of each figure, by system."""

    values: dict[str, dict[str, list[float]]] = field(
        default_factory=lambda: {s: {f: [] for f in FIGURES} for s in (TIERLOG, KAFKA)}
    )

    def add(self, system: str, figure: str, value: float) -> None:
        self.values[system][figure].append(value)

    def median(self, system: str, figure: str) -> float | None:
        values = self.values[system].get(figure)  # a figure an older run did not take
        return statistics.median(values) if values else None


def measure_round(
    systems: Sequence[Brokers], partitions: int, readings: Readings, advance: Advance, args: Any
) -> None:
    """One run of each figure of ``args.steps``, the systems interleaved in each step."""
    steps = set(args.steps)

    def under_load(brokers: Brokers) -> contextlib.AbstractContextManager[object]:
        return loaded(brokers, partitions, args.light_load)

    def alone(brokers: Brokers) -> contextlib.AbstractContextManager[None]:
        """The other system sidelined unless ``--rivals-compete``: for the steps timed in
        seconds or less. Not for the restarts: a minute of Kafka's JVMs starting on both
        CPUs would starve a sidelined tierlog's leases (and the restarts are not close)."""
        rivals = [pid for other in systems if other is not brokers for pid in other.pids]
        return sidelined_unless(args.rivals_compete, rivals)

    if "idle" in steps:
        for brokers in systems:
            with under_load(brokers):
                cpu, rss = idle(brokers, args.idle_seconds)
            readings.add(brokers.name, "idle CPU s/min per broker", cpu)
            readings.add(brokers.name, "RSS MB per broker", rss)
        advance(1)
    if "scrape" in steps:
        for brokers in systems:
            with under_load(brokers), alone(brokers):
                scraped = brokers.scrape()
            if scraped is not None:
                readings.add(brokers.name, "/metrics bytes", scraped[0])
                readings.add(brokers.name, "/metrics ms", scraped[1] * 1000)
        advance(1)
    if "metadata" in steps:
        for brokers in systems:
            with under_load(brokers), alone(brokers):
                ms = metadata_ms(brokers.bootstrap, args.metadata_requests)
            readings.add(brokers.name, "Metadata of N partitions ms", ms)
        advance(1)
    if "clean-start" in steps:
        for brokers in systems:
            seconds = restart(brokers, partitions, brokers.stop_all)
            readings.add(brokers.name, "clean start s", seconds)
            progress(f"{partitions}: {brokers.name} clean start done")
        advance(1)
    if "kill-all" in steps:
        for brokers in systems:
            seconds = restart(brokers, partitions, brokers.kill_all)
            readings.add(brokers.name, "start after kill -9 s", seconds)
            progress(f"{partitions}: {brokers.name} start after kill -9 done")
        advance(1)
    for step, how in (("kill-one", "kill -9"), ("stop-one", "SIGTERM")):
        if step not in steps:
            continue
        for brokers in systems:
            lose = brokers.kill if step == "kill-one" else brokers.stop
            with under_load(brokers) as load, alone(brokers):
                led_again, writable, preferred = lose_one(brokers, partitions, lose)
            if isinstance(load, LightLoad):
                progress(
                    f"{partitions}: {brokers.name} light load: {load.sent} sent, "
                    f"{load.failed} failed"
                )
            readings.add(brokers.name, f"{how} of 1 broker: led again s", led_again)
            readings.add(brokers.name, f"{how} of 1 broker: writable s", writable)
            if step == "stop-one":  # the table reports the return after a SIGTERM only
                readings.add(brokers.name, "back to preferred leaders s", preferred)
            progress(f"{partitions}: {brokers.name} {how} of broker {VICTIM} done")
        advance(1)


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive loopback ports free now, below the ephemeral
    range (so that no outgoing connection takes one while the brokers are down)."""
    for _ in range(1000):
        base = random.randrange(10_000, ephemeral_start() - count)
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


def measure_partitions(
    tools: KafkaTools,
    workdir: Path,
    partitions: int,
    readings: Readings,
    after_round: Callable[[], None],
    advance: Advance,
    args: Any,
) -> None:
    """``args.runs`` rounds on two fresh clusters with a topic of ``partitions``, each
    round's figures added to ``readings``, then ``after_round`` called."""
    base_port = free_port_run(3 * BROKERS)
    with clusters(
        tools, workdir, BROKERS, start_timeout_s=START_TIMEOUT_S, base_port=base_port
    ) as (kafka, _):
        systems: list[Brokers] = [
            TierlogCluster((workdir / "tierlog").resolve(), base_port),
            KafkaBrokers(kafka),
        ]
        for brokers in systems:
            bootstrap = brokers.bootstrap
            seconds = timed(lambda: create_topic(bootstrap, partitions))  # noqa: B023
            progress(f"{partitions}: {brokers.name} topic created and ready in {seconds:.1f} s")
        for _ in range(args.runs):
            measure_round(systems, partitions, readings, advance, args)
            after_round()


# --- the report -------------------------------------------------------------------------


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def table(readings: dict[int, Readings]) -> str:
    rows = [
        "| figure (median) | N | tierlog | Kafka | tierlog/Kafka |",
        "|---|---|---|---|---|",
    ]
    for figure in FIGURES:
        for partitions, read in readings.items():
            ours, theirs = read.median(TIERLOG, figure), read.median(KAFKA, figure)
            ratio = f"{ours / theirs:.2f}" if ours is not None and theirs else "-"
            rows.append(
                f"| {figure} | {partitions:,} | {_cell(ours)} | {_cell(theirs)} | {ratio} |"
            )
    return "\n".join(rows)


def series(readings: dict[int, Readings]) -> list[Series]:
    counts = sorted(readings)
    return [
        Series(
            figure,
            counts,
            {
                system: [readings[n].median(system, figure) for n in counts]
                for system in (TIERLOG, KAFKA)
            },
        )
        for figure in FIGURES
    ]


def run(args: argparse.Namespace, scratch: Path) -> None:
    tools = KafkaTools.locate()
    print(machine_line())
    print(f"Kafka {tools.version}; {BROKERS} brokers each, replication factor {BROKERS}.")
    if args.light_load:
        print(f"Under a light load of {args.light_load:g} records/s (all but the restarts).")
    readings: dict[int, Readings] = {}
    loads: list[float] = []
    started = time.monotonic()
    tracker = choose_tracker(args.progress)
    with tracker("steps", len(args.partitions) * args.runs * len(args.steps), "step") as advance:

        def advance_and_sample(n: int) -> None:
            loads.append(os.getloadavg()[0])
            advance(n)

        def save() -> None:
            if args.json:
                Path(args.json).write_text(json.dumps({n: r.values for n, r in readings.items()}))
            progress(f"so far:\n{table(readings)}")

        for partitions in args.partitions:
            readings[partitions] = Readings()
            here = scratch / f"p{partitions}"
            measure_partitions(
                tools, here, partitions, readings[partitions], save, advance_and_sample, args
            )
    print(
        f"{args.runs} runs per N (medians; systems interleaved), {args.idle_seconds:g} s idle "
        f"windows; {time.monotonic() - started:.0f} s in all; 1-minute load average "
        f"{min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f})."
    )
    report(readings, args.svg)


def report(readings: dict[int, Readings], svg: str | None) -> None:
    """The table of medians, every run's figures, and the plot."""
    print()
    print(table(readings))
    print()
    for partitions, read in readings.items():
        for system, figures in read.values.items():
            runs = "; ".join(
                f"{f} " + ", ".join(_cell(v) for v in values) for f, values in figures.items()
            )
            print(f"- {partitions:,} {system}: {runs}")
    if svg:
        write_svg(Path(svg), "partitions (N)", series(readings))
        print(f"\nplot: {svg}")


def load(paths: Sequence[str]) -> dict[int, Readings]:
    """The readings ``--json`` saved, of one run or several (a later file's N wins)."""
    readings = {}
    for path in paths:
        for count, values in json.loads(Path(path).read_text()).items():
            readings[int(count)] = Readings(values)
    return dict(sorted(readings.items()))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[500, 2000, 4000])
    parser.add_argument("--runs", type=int, default=3, help="medians reported")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument(
        "--steps", nargs="+", choices=STEPS, default=list(STEPS), help="measure only these"
    )
    parser.add_argument("--metadata-requests", type=int, default=5, help="per run; median")
    parser.add_argument(
        "--light-load",
        type=float,
        default=0.0,
        metavar="R",
        help="records/s over all partitions during all but the restarts (0: none)",
    )
    parser.add_argument(
        "--rivals-compete",
        action="store_true",
        help="leave the system not being measured at its normal CPU priority (by default it "
        "is sidelined during the scrape, Metadata and lose-one steps: side_by_side.sidelined)",
    )
    parser.add_argument("--svg", help="write the plot here (e.g. docs/scale-bench.svg)")
    parser.add_argument("--json", help="save every run's figures here after each round")
    parser.add_argument(
        "--report", nargs="+", metavar="JSON", help="measure nothing: the table and plot of these"
    )
    parser.add_argument("--progress", action="store_true", help="draw a bar even off a terminal")
    parser.add_argument("--workdir", help="under this dir (default: the system's temp dir)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.report:
        report(load(args.report), args.svg)
        return
    where = Path(args.workdir) if args.workdir else None
    run_in_scratch("tierlog-partition-scale-", where, lambda scratch: run(args, scratch))


if __name__ == "__main__":
    main()
