"""A load test: producer and consumer processes against one sidecar on loopback.

Three producers (``load_worker.py``, each its own process with tierlog.client) send at a
steady rate for ``TIERLOG_LOAD_SECONDS`` (180 s by default: the issue's "a few
minutes", the whole test near 190 s; set it higher for a soak, lower for a quick look),
while two consumers read disjoint halves of the partitions.  Then: no client saw an
error; every acknowledged record was consumed exactly once, at the offset it was
acknowledged with, in each producer's order per partition; the sidecar's resident
memory, sampled every second, did not grow after warm-up (the peak of the last third
of the run within 20% or 16 MiB of the first third's); the sidecar's request counters
agree with the calls the clients counted themselves (a client interceptor in each
worker): the same calls of each method, the same OK answers, no code but OK and
CANCELLED (a closed consumer's streams, a closed producer's stream), no
error reason; and its log end offsets are the ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.scrape import METRICS, scrape_sidecar
from tierlog.client import AdminClient

from .conftest import SidecarStarter

LOAD_SECONDS = float(os.environ.get("TIERLOG_LOAD_SECONDS", "180"))
PRODUCERS = 3
RECORDS_PER_S = 800  # per producer
PARTITIONS = 4
CONSUMER_PARTITIONS = ("0,2", "1,3")
MIB = 1024 * 1024
WORKER = Path(__file__).with_name("load_worker.py")


def _worker(*args: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _finish(process: subprocess.Popen[bytes], out: Path, timeout_s: float) -> dict[str, object]:
    output, _ = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, output.decode(errors="replace")
    summary: dict[str, object] = json.loads(out.read_text())
    return summary


class RssSampler(threading.Thread):
    def __init__(self, read_rss: Callable[[], int]) -> None:
        super().__init__(daemon=True)
        self.read_rss = read_rss
        self.samples: list[int] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(1.0):
            self.samples.append(self.read_rss())


def _per_method(calls: Counter[tuple[str, str]]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for (method, _code), count in calls.items():
        totals[method] += count
    return totals


@pytest.mark.slow
def test_producers_and_consumers_under_load(sidecars: SidecarStarter, tmp_path: Path) -> None:
    sidecar = sidecars("data", METRICS, "log.segment.bytes=8388608")
    with AdminClient(sidecar.address) as admin:
        admin.create_topic("load", PARTITIONS)
    done = tmp_path / "done.json"
    consumers = [
        (
            _worker(
                "consumer",
                sidecar.address,
                "load",
                parts,
                LOAD_SECONDS,
                done,
                tmp_path / f"c{i}.json",
            ),
            i,
        )
        for i, parts in enumerate(CONSUMER_PARTITIONS)
    ]
    sampler = RssSampler(sidecar.rss_bytes)
    sampler.start()
    producers = [
        _worker(
            "producer",
            sidecar.address,
            "load",
            i,
            LOAD_SECONDS,
            RECORDS_PER_S,
            tmp_path / f"p{i}.json",
        )
        for i in range(PRODUCERS)
    ]
    produced = [
        _finish(p, tmp_path / f"p{i}.json", LOAD_SECONDS + 120) for i, p in enumerate(producers)
    ]
    sampler.stopping.set()
    sampler.join()

    # Every record was acknowledged, once, at offsets that tile each partition.
    acked: dict[int, dict[int, str]] = {p: {} for p in range(PARTITIONS)}
    for summary in produced:
        assert summary["failures"] == [], summary["failures"]
        assert isinstance(summary["acked"], list) and len(summary["acked"]) == summary["sent"]
        for partition, offset, value in summary["acked"]:
            assert offset not in acked[partition], (partition, offset)
            acked[partition][offset] = value
    ends = {p: len(by_offset) for p, by_offset in acked.items()}
    assert all(sorted(acked[p]) == list(range(ends[p])) for p in acked), "offsets with gaps"
    assert sum(ends.values()) >= PRODUCERS * RECORDS_PER_S * LOAD_SECONDS * 0.8
    done.write_text(json.dumps(ends))

    consumed = [_finish(c, tmp_path / f"c{i}.json", 120) for c, i in consumers]
    for summary in consumed:
        assert summary["failures"] == [], summary["failures"]
        records = summary["records"]
        assert isinstance(records, dict)
        for partition_text, pairs in records.items():
            partition = int(partition_text)
            assert [offset for offset, _ in pairs] == list(range(ends[partition]))
            assert dict(pairs) == acked[partition]
            last_seq: dict[str, int] = {}  # each producer's records in its order
            for _, value in pairs:
                producer, _, seq = value.partition("-")
                assert int(seq) > last_seq.get(producer, -1), (partition, value)
                last_seq[producer] = int(seq)

    # Memory stays flat once warmed up.
    samples = sampler.samples
    assert len(samples) >= 9, samples
    third = len(samples) // 3
    first, last = max(samples[:third]), max(samples[-third:])
    assert last <= max(first * 1.2, first + 16 * MIB), [s // MIB for s in samples]

    # The sidecar counted what the clients did.
    found = scrape_sidecar(sidecar)
    # The admin client's: Metadata (do the brokers keep their own topics?), CreateTopics.
    client_calls: Counter[tuple[str, str]] = Counter(
        {("Metadata", "OK"): 1, ("CreateTopics", "OK"): 1}
    )
    for summary in (*produced, *consumed):
        calls = summary["calls"]
        assert isinstance(calls, dict)
        for method, by_code in calls.items():
            client_calls.update({(method, code): count for code, count in by_code.items()})
    server_calls: Counter[tuple[str, str]] = Counter()
    for labels, value in found.labelled("tierlog_requests_total").items():
        named = dict(labels)
        if named["grpc_service"] in ("LogService", "AdminService"):
            server_calls[(named["method"], named["code"])] += int(value)
    client_total, server_total = _per_method(client_calls), _per_method(server_calls)
    assert set(server_total) == set(client_total), (server_calls, client_calls)
    for method in client_total:
        if method == "FetchSession":
            # A closing consumer cancels its sessions: one cancelled as it was opened may
            # never reach the sidecar.
            assert server_total[method] <= client_total[method], (server_calls, client_calls)
            assert server_calls[(method, "OK")] == client_calls[(method, "OK")]
        elif method == "ProduceStream":
            # A closing producer half-closes its stream, then cancels it: the sidecar
            # ends it OK or CANCELLED, whichever it sees first.  Every stream is counted.
            assert server_total[method] == client_total[method], (server_calls, client_calls)
        else:
            assert server_calls[(method, "OK")] == client_calls[(method, "OK")], method
            assert server_total[method] == client_total[method], method
    assert {code for _, code in server_calls} <= {"OK", "CANCELLED"}, server_calls
    assert not found.labelled("tierlog_errors_total"), found.labelled("tierlog_errors_total")
    for partition, end in ends.items():
        assert found.value("tierlog_log_end_offset", topic="load", partition=str(partition)) == end
    sidecar.assert_alive()
