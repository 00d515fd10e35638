"""``tierlog perf produce|consume`` typed as Kafka's perf tools are (issue 34, item 2):
``--producer-props`` as a list, ``--print-metrics``, a progress line every 5 s, and the
consumer's CSV with ``--group`` and ``--show-detailed-stats``; processes against one real
sidecar the module shares (each test its own topic)."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess

import pytest

from tests.support.sidecars import console_script
from tierlog.cli.perf import REPORTING_INTERVAL_S
from tierlog.client import Consumer, TopicPartition

from .stopping import FAULTHANDLER_ENV, PROMPT_S, STOPS, stopped, until, waits_in_select
from .test_kafka_flags import ok, typed


def tierlog(line: str) -> str:
    """``tierlog LINE`` as a user types it; its stdout (exit status 0)."""
    return ok(typed(*shlex.split(line)))


TOTAL = re.compile(
    r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
    r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$"
)
WINDOW = re.compile(
    r"^\d+ records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
    r"[\d.]+ ms max latency\.$"
)
CONSUMER_HEADER = (
    "data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
    "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"


@pytest.fixture(scope="module")
def server(module_server: str) -> str:
    return module_server


def _metrics(output: str) -> dict[str, float]:
    """ToolsUtils.printMetrics' table: a blank line, its header, ``NAME : VALUE`` rows."""
    header_at = output.splitlines().index(
        next(line for line in output.splitlines() if line.startswith("Metric Name"))
    )
    assert output.splitlines()[header_at - 1] == ""
    rows = [line.rsplit(" : ", 1) for line in output.splitlines()[header_at + 1 :] if line]
    return {name.strip(): float(value) for name, value in rows}


@pytest.mark.parametrize(
    "props",
    [
        "--producer-props acks=all linger.ms=10 batch.size=4096",
        "--producer-props acks=all --producer-props batch.size=4096",
    ],
    ids=["kafkas-list", "repeated"],
)
def test_perf_produce_takes_producer_props_as_a_list_and_prints_metrics(
    server: str, props: str
) -> None:
    topic = f"props-{props.count('--')}"
    tierlog(f"topics --bootstrap-server {server} --create --topic {topic}")
    produced = tierlog(
        f"perf produce --bootstrap-server {server} --topic {topic} --num-records 2000 "
        f"--record-size 100 --throughput -1 {props} --print-metrics"
    )
    total = TOTAL.match(produced.splitlines()[0])
    assert total is not None and total.group(1) == "2000", produced
    metrics = _metrics(produced)
    client = "{client-id=perf-producer-client}"
    assert metrics[f"producer-metrics:record-send-total:{client}"] == 2000
    assert 0 < metrics[f"producer-metrics:batch-size-max:{client}"] <= 4096  # batch.size held


def test_perf_produce_prints_a_progress_line_every_reporting_interval(server: str) -> None:
    tierlog(f"topics --bootstrap-server {server} --create --topic windows")
    # 2.5 intervals at 40 records/s: acknowledgements past each interval print its line.
    records = int(2.5 * REPORTING_INTERVAL_S * 40)
    produced = tierlog(
        f"perf produce --bootstrap-server {server} --topic windows --num-records {records} "
        "--record-size 10 --throughput 40"
    ).splitlines()
    *windows, total = produced
    # Two intervals at least (more if a loaded machine sends slower than asked).
    assert len(windows) >= 2 and all(WINDOW.match(line) for line in windows), produced
    assert TOTAL.match(total) is not None
    windowed = sum(int(line.split()[0]) for line in windows)
    assert 0 < windowed < records  # the last records come after the last full interval


def test_perf_consume_prints_kafkas_csv_and_commits_with_its_group(server: str) -> None:
    tierlog(f"topics --bootstrap-server {server} --create --topic csv --partitions 2")
    tierlog(
        f"perf produce --bootstrap-server {server} --topic csv --num-records 300 "
        "--record-size 100 --throughput -1"
    )
    consumed = tierlog(
        f"perf consume --bootstrap-server {server} --topic csv --messages 300 --group perf-g "
        "--timeout 20000 --print-metrics"
    ).splitlines()
    assert consumed[0] == f"start.time, end.time, {CONSUMER_HEADER}"
    fields = consumed[1].split(", ")
    assert re.fullmatch(DATE, fields[0]) and re.fullmatch(DATE, fields[1]), fields
    assert fields[2] == f"{300 * 100 / 1024 / 1024:.4f}" and fields[4] == "300"
    assert int(fields[6]) > 0  # joining the group took a rebalance
    metrics = _metrics("\n".join(consumed))
    client = "{client-id=perf-consumer-client}"
    assert metrics[f"consumer-fetch-manager-metrics:records-consumed-total:{client}"] == 300
    described = tierlog(f"consumer-groups --bootstrap-server {server} --describe --group perf-g")
    lags = [line.split()[5] for line in described.splitlines() if line.startswith("perf-g ")]
    assert lags == ["0", "0"]  # the group committed what it read, on close
    hidden = tierlog(
        f"perf consume --bootstrap-server {server} --topic csv --messages 300 --hide-header "
        "--fetch-size 1024"
    ).splitlines()
    assert len(hidden) == 1 and hidden[0].split(", ")[4] == "300"
    # From the end nothing comes: the command's own --timeout ends it, saying so.
    latest = typed(
        *shlex.split(
            f"perf consume --bootstrap-server {server} --topic csv --messages 1 --from-latest "
            "--timeout 1000 --hide-header"
        )
    )
    assert latest.returncode == 1
    assert latest.stdout.startswith("WARNING: Exiting before consuming the expected number")
    assert latest.stdout.splitlines()[1].split(", ")[4] == "0"


def test_perf_consume_show_detailed_stats_prints_each_interval(server: str) -> None:
    tierlog(f"topics --bootstrap-server {server} --create --topic detailed")
    command = shlex.split(
        f"perf consume --bootstrap-server {server} --topic detailed --messages 320 "
        "--show-detailed-stats --reporting-interval 500 --timeout 30000"
    )
    with subprocess.Popen(
        [console_script("tierlog"), *command], stdout=subprocess.PIPE, text=True
    ) as reader:
        assert reader.stdout is not None
        header = reader.stdout.readline().rstrip("\n")  # the reader is up
        # 320 records over 4 s: the reader sees them arrive across several intervals.
        tierlog(
            f"perf produce --bootstrap-server {server} --topic detailed --num-records 320 "
            "--record-size 10 --throughput 80"
        )
        out, _ = reader.communicate(timeout=120)
    assert reader.returncode == 0
    assert header == f"time, threadId, {CONSUMER_HEADER}"
    lines = out.splitlines()
    assert len(lines) >= 2, out
    for line in lines:
        fields = line.split(", ")
        assert re.fullmatch(DATE, fields[0]) and fields[1] == "0" and len(fields) == 10, line
    counts = [int(line.split(", ")[4]) for line in lines]
    assert counts == sorted(counts) and counts[-1] <= 320


def _end_offset(server: str, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    with Consumer({"bootstrap.servers": server}) as consumer:
        return consumer.end_offsets([tp])[tp]


@STOPS
def test_perf_produce_stopped_in_its_throttle_prints_the_total_of_what_was_sent(
    server: str, stop: signal.Signals, status: int
) -> None:
    """One record, then the throttle sleeps 100 s for the next: the stop ends the sleep,
    and the total says the record that was sent and acknowledged."""
    topic = f"stopped-throttle-{stop.name}"
    tierlog(f"topics --bootstrap-server {server} --create --topic {topic}")
    command = shlex.split(
        f"perf produce --bootstrap-server {server} --topic {topic} --num-records 10 "
        "--record-size 10 --throughput 0.01"
    )
    with subprocess.Popen(
        [console_script("tierlog"), *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=FAULTHANDLER_ENV,
    ) as producing:
        try:
            until(lambda: _end_offset(server, topic) == 1, "the first record stored")
            until(lambda: waits_in_select(producing.pid), "the throttle's sleep")
            elapsed_s, out, err = stopped(producing, stop)
        finally:
            producing.kill()
    assert producing.returncode == status, err
    assert elapsed_s < PROMPT_S
    total = TOTAL.match(out.splitlines()[-1])
    assert total is not None and total[1] == "1", out


def _committed(consumer: Consumer, tp: TopicPartition) -> int | None:
    committed = consumer.committed([tp])[tp]
    return None if committed is None else committed.offset


@STOPS
def test_perf_consume_stopped_while_it_waits_for_more_prints_its_total(
    server: str, stop: signal.Signals, status: int
) -> None:
    """Asked for more records than the topic holds, with a minute's ``--timeout``: the
    stop wakes its poll, and the total is what it read, with no timeout's warning."""
    topic, group = f"stopped-reader-{stop.name}", f"stopped-{stop.name}"
    tierlog(f"topics --bootstrap-server {server} --create --topic {topic}")
    tierlog(
        f"perf produce --bootstrap-server {server} --topic {topic} --num-records 50 "
        "--record-size 10 --throughput -1"
    )
    command = shlex.split(
        f"perf consume --bootstrap-server {server} --topic {topic} --messages 1000 "
        f"--timeout 60000 --group {group} --consumer-property auto.commit.interval.ms=100"
    )
    tp = TopicPartition(topic, 0)
    with (
        Consumer({"bootstrap.servers": server, "group.id": group}) as watcher,
        subprocess.Popen(
            [console_script("tierlog"), *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=FAULTHANDLER_ENV,
        ) as reading,
    ):
        try:
            until(lambda: _committed(watcher, tp) == 50, "all read")  # its automatic commits
            elapsed_s, out, err = stopped(reading, stop)
        finally:
            reading.kill()
    assert reading.returncode == status, err
    assert elapsed_s < PROMPT_S
    header, total = out.splitlines()
    assert header == f"start.time, end.time, {CONSUMER_HEADER}"
    assert total.split(", ")[4] == "50", out
