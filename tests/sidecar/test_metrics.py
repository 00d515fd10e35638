"""Prometheus metrics, liveness and readiness of a real sidecar, scraped over HTTP.

Every series docs/METRICS.md lists is asserted here to exist and to move with the
traffic that should move it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from tests.storage.conftest import crash
from tests.support.prometheus import SERVICE_MONITOR_TARGET_LABELS
from tests.support.scrape import METRICS, Scrape, get, metrics_address, scrape, scrape_sidecar
from tierlog.api.v1 import admin_service_pb2, log_service_pb2, log_service_pb2_grpc
from tierlog.client.cluster import Cluster
from tierlog.client.groups import GroupClient, OffsetAndMetadata
from tierlog.file_lock import exclusive_lock
from tierlog.sidecar.metrics import RecoveryMetrics
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.records import SimpleRecord, build_batch
from tierlog.storage.topic_partition import TopicPartition

from .conftest import SidecarFactory, sidecar_script

# Every tierlog series a dashboard or alert may use (docs/METRICS.md).
DOCUMENTED = {
    "tierlog_requests_total",
    "tierlog_request_duration_seconds_bucket",
    "tierlog_request_duration_seconds_count",
    "tierlog_request_duration_seconds_sum",
    "tierlog_stream_message_duration_seconds_bucket",
    "tierlog_stream_message_duration_seconds_count",
    "tierlog_stream_message_duration_seconds_sum",
    "tierlog_requests_in_flight",
    "tierlog_request_bytes_total",
    "tierlog_response_bytes_total",
    "tierlog_errors_total",
    "tierlog_topic_bytes_in_total",
    "tierlog_topic_bytes_out_total",
    "tierlog_log_flush_duration_seconds_bucket",
    "tierlog_log_flush_duration_seconds_count",
    "tierlog_log_flush_duration_seconds_sum",
    "tierlog_produce_bytes_in_flight",
    "tierlog_produce_bytes_waiting",
    "tierlog_ready",
    "tierlog_recovery_scanned_bytes",
    "tierlog_recovery_target_bytes",
    "tierlog_recovery_in_progress",
    "tierlog_recovery_duration_seconds",
    "tierlog_log_start_offset",
    "tierlog_log_end_offset",
    "tierlog_log_size_bytes",
    "tierlog_log_segments",
    "tierlog_partitions",
    "tierlog_validation_decompressed_bytes_in_flight",
    "tierlog_validation_decompressed_bytes_limit",
    "tierlog_validation_throttled_total",
    "tierlog_log_dir_available_bytes",
    "tierlog_log_dir_capacity_bytes",
    "tierlog_cleaner_runs_total",
    "tierlog_cleaner_last_run_read_bytes",
    "tierlog_cleaner_last_run_written_bytes",
    "tierlog_retention_runs_total",
    "tierlog_retention_deleted_segments_total",
    "tierlog_remote_read_bytes_total",
    "tierlog_remote_fetch_duration_seconds_bucket",
    "tierlog_remote_fetch_duration_seconds_count",
    "tierlog_remote_fetch_duration_seconds_sum",
    "tierlog_remote_fetch_bytes_total",
    "tierlog_remote_cache_hits_total",
    "tierlog_remote_cache_misses_total",
    "tierlog_remote_cache_size_bytes",
    "tierlog_remote_cache_entries",
    "tierlog_remote_cache_evictions_total",
    "tierlog_remote_cache_discarded_total",
    "tierlog_remote_cache_max_bytes",
    "tierlog_remote_cache_read_ahead_bytes",
    "tierlog_remote_cache_read_ahead_hits_total",
    "tierlog_remote_cache_read_ahead_evicted_unread_total",
    "tierlog_remote_read_ahead_memory_bytes",
    "tierlog_remote_read_ahead_memory_max_bytes",
    "process_resident_memory_bytes",
}

LOG = {"grpc_service": "LogService"}


def _batch(count: int, value_bytes: int = 100) -> bytes:
    now_ms = int(time.time() * 1000)
    return build_batch([SimpleRecord(b"k", b"v" * value_bytes, now_ms, ())] * count)


def test_calls_bytes_errors_and_logs_move_their_series(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(
        tmp_path / "data",
        METRICS,
        "log.flush.interval.messages=1",  # every append is fsynced by the group committer
        "log.retention.check.interval.ms=200",
    )
    # No size retention yet: a pass every 200 ms would otherwise delete closed segments
    # while they are produced and counted; it is switched on once they are (below).
    sidecar.create_topic("metered", segment_bytes="2000")
    before = scrape_sidecar(sidecar)
    assert DOCUMENTED - before.names() <= {
        "tierlog_topic_bytes_in_total",
        "tierlog_topic_bytes_out_total",
        "tierlog_errors_total",
    }, "series missing before any traffic"
    # Every method's latency is there from the start, at zero: a dashboard's produce
    # latency has its series whichever way clients produce (or before they do).
    for method, histogram in (
        ("Produce", "tierlog_request_duration_seconds_count"),
        ("ProduceStream", "tierlog_stream_message_duration_seconds_count"),
        ("Subscribe", "tierlog_stream_message_duration_seconds_count"),
    ):
        assert before.labelled(histogram)[frozenset({**LOG, "method": method}.items())] == 0

    batch = _batch(5)
    for _ in range(6):  # ~600 bytes each: the 2000-byte segments roll
        sidecar.log.Produce(log_service_pb2.ProduceRequest(topic="metered", record_batches=batch))
    fetched = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="metered", offset=25))
    with pytest.raises(grpc.RpcError):
        sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="absent", offset=0))
    stream = sidecar.log.ProduceStream(
        iter(
            [
                log_service_pb2.ProduceStreamRequest(
                    produce=log_service_pb2.ProduceRequest(topic="metered", record_batches=b"junk")
                ),
                log_service_pb2.ProduceStreamRequest(
                    produce=log_service_pb2.ProduceRequest(topic="metered", record_batches=batch)
                ),
            ]
        )
    )
    answers = list(stream)
    assert answers[0].HasField("error") and answers[1].HasField("produced")

    after = scrape_sidecar(sidecar)
    assert after.names() >= DOCUMENTED
    assert after.value("tierlog_requests_total", **LOG, method="Produce", code="OK") == 6
    assert after.value("tierlog_requests_total", **LOG, method="Fetch", code="OK") == 1
    assert after.value("tierlog_requests_total", **LOG, method="Fetch", code="NOT_FOUND") == 1
    assert after.value("tierlog_request_duration_seconds_count", **LOG, method="Produce") == 6
    assert after.value("tierlog_request_duration_seconds_sum", **LOG, method="Produce") > 0
    assert after.value(
        "tierlog_request_duration_seconds_bucket", **LOG, method="Produce", le="+Inf"
    ) == 6  # fmt: skip
    assert after.value("tierlog_requests_in_flight", **LOG, method="Produce") == 0
    assert after.value("tierlog_request_bytes_total", **LOG, method="Produce") > 6 * len(batch)
    assert after.value("tierlog_response_bytes_total", **LOG, method="Fetch") >= len(
        fetched.record_batches
    )
    # Record bytes: what was appended (the junk item was not) and what was fetched.
    assert after.value("tierlog_topic_bytes_in_total", topic="metered") == 7 * len(batch)
    assert after.value("tierlog_topic_bytes_out_total", topic="metered") == len(
        fetched.record_batches
    )
    errors = after.labelled("tierlog_errors_total")
    assert errors == {
        frozenset({**LOG, "method": "Fetch", "reason": "UNKNOWN_TOPIC_OR_PARTITION"}.items()): 1,
        frozenset({**LOG, "method": "ProduceStream", "reason": "CORRUPT_MESSAGE"}.items()): 1,
    }
    assert after.value("tierlog_log_flush_duration_seconds_count") >= 7
    # The data dir's filesystem, as statvfs sees it (what the disk-filling alert divides).
    [(log_dir_labels, capacity)] = after.labelled("tierlog_log_dir_capacity_bytes").items()
    space = os.statvfs(tmp_path / "data")
    assert capacity == space.f_blocks * space.f_frsize
    assert 0 < after.labelled("tierlog_log_dir_available_bytes")[log_dir_labels] <= capacity
    assert after.value("tierlog_log_flush_duration_seconds_sum") > 0

    partition = {"topic": "metered", "partition": "0"}
    assert after.value("tierlog_log_end_offset", **partition) == 35
    assert after.value("tierlog_log_segments", **partition) >= 2
    assert after.value("tierlog_log_size_bytes", **partition) > 0
    assert after.value("tierlog_log_start_offset", **partition) == 0
    assert after.value("tierlog_retention_deleted_segments_total") == 0
    assert after.value("tierlog_partitions") == 1
    assert after.value("tierlog_ready") == 1
    assert after.value("process_resident_memory_bytes") > 0

    # Retention (retention.bytes=1) deletes the closed segments: the log start moves.
    sidecar.admin.AlterConfigs(
        admin_service_pb2.AlterConfigsRequest(topic="metered", set_configs={"retention.bytes": "1"})
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        later = scrape_sidecar(sidecar)
        if later.value("tierlog_retention_deleted_segments_total") > 0:
            break
        time.sleep(0.1)
    assert later.value("tierlog_retention_runs_total") >= 1
    assert later.value("tierlog_log_start_offset", **partition) > 0
    # The pass counts what it deleted once it is done: the gauge has already dropped by it.
    deleted = later.value("tierlog_retention_deleted_segments_total")
    assert later.value("tierlog_log_segments", **partition) == 1  # the active one stays
    assert after.value("tierlog_log_segments", **partition) - 1 == deleted
    sidecar.assert_alive()


def test_no_series_has_a_label_its_scrape_target_gets(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    """A ServiceMonitor's target labels (``service``, ``pod``...) would rename a series'
    own label of the same name to ``exported_<name>``: the dashboards' selectors on it
    would find nothing. The gRPC service is ``grpc_service``, as go-grpc-prometheus
    names it."""
    sidecar = sidecar_factory(tmp_path / "data", METRICS)
    sidecar.create_topic("labelled")
    sidecar.log.Produce(log_service_pb2.ProduceRequest(topic="labelled", record_batches=_batch(1)))
    with pytest.raises(grpc.RpcError):
        sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="absent", offset=0))
    scraped = scrape_sidecar(sidecar)
    assert scraped.value("tierlog_requests_total", **LOG, method="Produce", code="OK") == 1
    clashing = {
        (name, label)
        for name, labels in scraped.samples
        for label, _ in labels
        if label in SERVICE_MONITOR_TARGET_LABELS
    }
    assert not clashing


def test_streams_are_timed_per_message_not_per_stream(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    """A client's produce and fetch latency, when it streams: each ProduceStream request
    to its answer, each Subscribe message from the previous one. The stream's own life
    (here over a client's idle second) is not what its produce or fetch took."""
    sidecar = sidecar_factory(tmp_path / "data", METRICS)
    sidecar.create_topic("streamed")
    produce = log_service_pb2.ProduceStreamRequest(
        produce=log_service_pb2.ProduceRequest(topic="streamed", record_batches=_batch(5))
    )
    first_answered = threading.Event()
    idle_s = 1.0

    def requests() -> Iterator[log_service_pb2.ProduceStreamRequest]:
        yield produce
        assert first_answered.wait(10)
        time.sleep(idle_s)  # the client has nothing to send: the stream idles, no request waits
        yield produce

    answers = []
    for answer in sidecar.log.ProduceStream(requests()):
        answers.append(answer)
        first_answered.set()
    assert [answer.produced.base_offset for answer in answers] == [0, 5]
    subscribe = log_service_pb2.SubscribeRequest(topic="streamed", offset=0, max_bytes=1)
    messages = sidecar.log.Subscribe(subscribe)  # one batch a message: two messages
    assert all(next(messages).record_batches for _ in range(2))
    messages.cancel()

    scraped = scrape_sidecar(sidecar)
    stream = {**LOG, "method": "ProduceStream"}
    assert scraped.value("tierlog_request_duration_seconds_sum", **stream) >= idle_s
    assert scraped.value("tierlog_stream_message_duration_seconds_count", **stream) == 2
    assert scraped.value("tierlog_stream_message_duration_seconds_sum", **stream) < idle_s / 2
    tail = {**LOG, "method": "Subscribe"}
    assert scraped.value("tierlog_stream_message_duration_seconds_count", **tail) >= 2
    assert scraped.value(
        "tierlog_stream_message_duration_seconds_bucket", **tail, le="+Inf"
    ) == scraped.value("tierlog_stream_message_duration_seconds_count", **tail)


def test_the_cleaner_counts_its_rounds(sidecar_factory: SidecarFactory, tmp_path: Path) -> None:
    sidecar = sidecar_factory(tmp_path / "data", METRICS, "log.cleaner.backoff.ms=100")
    sidecar.create_topic(
        "compacted",
        cleanup_policy="compact",
        segment_bytes="1000",
        min_cleanable_dirty_ratio="0.01",
    )
    for _ in range(10):
        sidecar.log.Produce(
            log_service_pb2.ProduceRequest(topic="compacted", record_batches=_batch(1))
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = scrape_sidecar(sidecar)
        if found.value("tierlog_cleaner_runs_total") >= 1:
            break
        time.sleep(0.2)
    assert found.value("tierlog_cleaner_runs_total") >= 1
    assert found.value("tierlog_cleaner_last_run_read_bytes") > 0
    assert found.value("tierlog_cleaner_last_run_written_bytes") > 0


def _unclean_logs(data_dir: Path, partitions: int, batches: int) -> int:
    """Logs written and then abandoned as by a crash: the next start scans all of them."""
    manager = LogManager(LogManagerConfig(log_dirs=(data_dir,)))
    manager.startup()
    batch = _batch(1, value_bytes=10)
    for number in range(partitions):
        partition_log = manager.get_or_create_log(TopicPartition("crashed", number))
        for _ in range(batches):
            partition_log.append(batch)
    crash(manager)  # no close, no checkpoints, no clean-shutdown marker
    return partitions * batches * len(batch)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_readyz_waits_for_recovery_and_the_progress_is_scraped(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    data_dir = tmp_path / "data"
    written = _unclean_logs(data_dir, partitions=4, batches=10_000)
    log_path = tmp_path / "sidecar.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [
                *(sidecar_script(), "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"),
                *("--config", METRICS, "--config", "num.recovery.threads.per.data.dir=2"),
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    started.append(process)
    address = _wait_for_metrics(log_path, process)
    seen: list[tuple[int, str]] = []
    during: list[Scrape] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = get(address, "/readyz")
        seen.append(answer)
        if answer[0] == 200:
            break
        during.append(scrape(address))
        assert get(address, "/healthz")[0] == 200  # a long recovery is alive, not ready
    assert seen[0][0] == 503 and seen[0][1].strip() in ("starting", "recovering"), seen[0]
    assert seen[-1] == (200, "serving\n")
    assert "listening on" in log_path.read_text()
    recovering = [each for each in during if each.value("tierlog_recovery_in_progress") == 1]
    assert all(each.value("tierlog_ready") == 0 for each in recovering)
    assert any(0 < each.value("tierlog_recovery_scanned_bytes") < written for each in recovering), (
        "no scrape saw the recovery part way"
    )
    final = scrape(address)
    assert final.value("tierlog_recovery_in_progress") == 0
    assert final.value("tierlog_recovery_scanned_bytes") == written
    assert final.value("tierlog_recovery_target_bytes") == written
    assert final.value("tierlog_recovery_duration_seconds") > 0
    assert final.value("tierlog_ready") == 1
    assert final.value("tierlog_partitions") == 4
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0


def test_readyz_fails_as_soon_as_shutdown_begins(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    """/readyz says 503 from the first moment of the stop, while the process still lives
    (/healthz 200) and finishes its calls. What holds the stop here is one the broker
    waits for by design: a CreateTopics in flight, within ``tierlog.shutdown.grace.ms``,
    which waits for the partition-state store's lock on the new topic, held by the test as
    another broker changing that topic would hold it. (An open ProduceStream held nothing:
    a stopping broker ends it at once, and the probes raced the exit.)"""
    state_dir = tmp_path / "state"
    sidecar = sidecar_factory(
        tmp_path / "data",
        METRICS,
        "tierlog.shutdown.grace.ms=20000",
        f"tierlog.replication.state.dir={state_dir}",
    )
    address = metrics_address(sidecar.output)
    assert get(address, "/readyz") == (200, "serving\n")
    create = admin_service_pb2.CreateTopicsRequest(
        topics=[admin_service_pb2.NewTopic(name="held", num_partitions=1)]
    )
    creating = {"grpc_service": "AdminService", "method": "CreateTopics"}
    # The topic's head document's lock file (partition_state/local_store.py's layout).
    head_lock = state_dir / "topics" / "held.json.lock"
    with ThreadPoolExecutor(1) as pool, exclusive_lock(head_lock):
        created = pool.submit(sidecar.admin.CreateTopics, create, timeout=60)
        deadline = time.monotonic() + 10
        while scrape(address).value("tierlog_requests_in_flight", **creating) != 1:
            assert time.monotonic() < deadline, "the CreateTopics never arrived"
            time.sleep(0.02)
        sidecar.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while get(address, "/readyz")[0] == 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert get(address, "/readyz") == (503, "stopping\n")
        assert get(address, "/healthz") == (200, "ok\n")
        assert scrape(address).value("tierlog_ready") == 0
        assert sidecar.process.poll() is None  # the stop waits for the call
    assert not created.result(timeout=30).results[0].HasField("error")
    assert sidecar.stop() == 0
    assert "stopped cleanly" in sidecar.output
    # The topic is in the store, for the next start to take on: a broker already
    # stopping leads nothing new (its logs are about to close).
    assert not (tmp_path / "data" / "held-0").exists()
    assert "held-0: leading" not in sidecar.output


def test_json_logs_are_one_object_a_line(tmp_path: Path) -> None:
    log_path = tmp_path / "sidecar.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [
                *(sidecar_script(), "--data-dir", str(tmp_path / "data")),
                *("--listen", "127.0.0.1:0", "--log-format", "json"),
                *("--metrics-listen", "127.0.0.1:0"),
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_metrics(log_path, process)
        deadline = time.monotonic() + 30
        while "listening on" not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    entries = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert {"time", "level", "logger", "thread", "message"} <= set(entries[0])
    messages = [entry["message"] for entry in entries]
    assert any(message.startswith("listening on 127.0.0.1:") for message in messages)
    assert messages[-1] == "stopped cleanly"
    assert all(entry["level"] in ("INFO", "WARNING") for entry in entries)


def test_recovery_progress_adds_up_over_parallel_scans() -> None:
    from prometheus_client import CollectorRegistry

    recovery = RecoveryMetrics(CollectorRegistry())
    recovery.started()

    def scan(*logs: list[int]) -> None:  # one recovery thread: its logs one after another
        for sizes in logs:
            done = 0
            for size in sizes:
                done += size
                recovery(done, sum(sizes))

    threads = [
        threading.Thread(target=scan, args=([100, 200, 300], [50, 50])),
        threading.Thread(target=scan, args=([1000], [7, 7, 7])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = 600 + 100 + 1000 + 21
    assert _gauge(recovery.scanned_bytes) == _gauge(recovery.target_bytes) == total
    recovery(10, 40)  # a scan cut short by a truncation never reaches its total
    recovery.finished()
    assert _gauge(recovery.scanned_bytes) == _gauge(recovery.target_bytes) == total + 40
    assert _gauge(recovery.in_progress) == 0


def _gauge(gauge: object) -> float:
    (metric,) = gauge.collect()  # type: ignore[attr-defined]
    return float(metric.samples[0].value)


def _wait_for_metrics(log_path: Path, process: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = log_path.read_text()
        if "serving metrics at" in text:
            return metrics_address(text)
        assert process.poll() is None, f"the sidecar died:\n{text}"
        time.sleep(0.005)
    raise AssertionError(f"no metrics endpoint:\n{log_path.read_text()}")


def _in_flight(scraped: Scrape) -> float:
    return sum(scraped.labelled("tierlog_requests_in_flight").values())


def test_requests_in_flight_returns_to_zero_after_cancelled_and_abandoned_streams(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    sidecar = sidecar_factory(tmp_path / "data", METRICS)
    sidecar.create_topic("busy")
    batch = _batch(50, value_bytes=1000)  # ~50 KB: a stream has more to send than is read
    for _ in range(40):
        sidecar.log.Produce(log_service_pb2.ProduceRequest(topic="busy", record_batches=batch))
    subscribe = log_service_pb2.SubscribeRequest
    for _ in range(20):  # unary calls, answered and failed
        sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="busy", offset=0))
        with pytest.raises(grpc.RpcError):
            sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="absent", offset=0))
    for round_ in range(30):
        # Cancelled after one message, while the sidecar is writing the next ones.
        stream = sidecar.log.Subscribe(subscribe(topic="busy", offset=0, max_bytes=60_000))
        next(stream)
        stream.cancel()
        # Cancelled while it waits at the log end for records that do not come.
        waiting = sidecar.log.Subscribe(subscribe(topic="busy", offset=-1, max_wait_ms=0))
        waiting.cancel()
        # A client that goes away mid-stream: its connection closes, nothing is cancelled.
        with grpc.insecure_channel(sidecar.address) as channel:
            stub = log_service_pb2_grpc.LogServiceStub(channel)
            abandoned = stub.Subscribe(subscribe(topic="busy", offset=round_, max_bytes=60_000))
            next(abandoned)
        # A produce stream cancelled after its first answer.
        produces = sidecar.log.ProduceStream(
            iter(
                [log_service_pb2.ProduceStreamRequest(
                    produce=log_service_pb2.ProduceRequest(topic="busy", record_batches=batch)
                )] * 3
            )
        )  # fmt: skip
        next(produces)
        produces.cancel()

    # Every call above has ended; the gauge must come back down to 0 once the sidecar
    # has seen the cancellations and the closed connections.
    deadline = time.monotonic() + 20
    while _in_flight(idle := scrape_sidecar(sidecar)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert idle.labelled("tierlog_requests_in_flight") and _in_flight(idle) == 0, (
        idle.labelled("tierlog_requests_in_flight"),
        sidecar.output[-3000:],
    )
    assert idle.value("tierlog_requests_total", **LOG, method="Subscribe", code="CANCELLED") > 0
    assert "different Context" not in sidecar.output
    sidecar.assert_alive()


def test_a_broker_above_the_series_limit_sums_its_partitions_per_topic(
    sidecar_factory: SidecarFactory, tmp_path: Path
) -> None:
    """``tierlog.metrics.partition.series.max``: the scrape grows with the topics, and a
    sum still answers what the per-partition series did for a topic as a whole."""
    sidecar = sidecar_factory(
        tmp_path / "data",
        METRICS,
        "tierlog.metrics.partition.series.max=3",
        "offsets.topic.num.partitions=1",
    )
    sidecar.create_topic("orders", partitions=2)
    for partition, count in ((0, 5), (1, 7)):
        sidecar.log.Produce(
            log_service_pb2.ProduceRequest(
                topic="orders", partition=partition, record_batches=_batch(count)
            )
        )
    cluster = Cluster([sidecar.address])
    try:
        GroupClient(cluster, "billing").commit(
            {
                TopicPartition("orders", 0): OffsetAndMetadata(5),
                TopicPartition("orders", 1): OffsetAndMetadata(6),
            }
        )
        held_three = scrape_sidecar(sidecar)  # orders' two and __consumer_offsets' one
        assert held_three.value("tierlog_log_end_offset", topic="orders", partition="1") == 7
        assert held_three.value(
            "tierlog_consumergroup_committed_offset", consumergroup="billing", topic="orders",
            partition="1",
        ) == 6  # fmt: skip

        sidecar.create_topic("refunds", partitions=2)
        held_five = scrape_sidecar(sidecar)
    finally:
        cluster.close()
    for name in ("tierlog_log_end_offset", "tierlog_log_size_bytes", "tierlog_log_segments"):
        series = held_five.labelled(name)
        assert {dict(labels)["topic"] for labels in series} == {
            "orders", "refunds", "__consumer_offsets"
        }  # fmt: skip
        assert all("partition" not in dict(labels) for labels in series), name
    assert held_five.value("tierlog_log_end_offset", topic="orders") == 12
    assert held_five.value("tierlog_log_segments", topic="refunds") == 2
    assert held_five.value(
        "tierlog_consumergroup_committed_offset", consumergroup="billing", topic="orders"
    ) == 11  # fmt: skip
    assert held_five.value("tierlog_partitions") == 5
