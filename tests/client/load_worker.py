"""One producer or consumer process of the load test (``test_load.py``), using tierlog.client.

``load_worker.py producer ADDRESS TOPIC INDEX SECONDS RATE OUT``: sends ``RATE``
records/s for ``SECONDS``, values ``p<INDEX>-<seq>`` padded to ``VALUE_BYTES``, keys
spread over the partitions; writes what was acknowledged where, and the failures.

``load_worker.py consumer ADDRESS TOPIC PARTITIONS SECONDS DONE OUT``: reads the
partitions (a comma-separated list) from the beginning until the file ``DONE`` appears
and names end offsets it has reached (giving up ``CONSUMER_DEADLINE_S`` after the
producers' ``SECONDS``); checks each record comes at the next offset.

Both count every gRPC call they make by method and final status code (a client
interceptor on the channels), for the test to hold against the sidecar's
``tierlog_requests_total``; everything goes to the JSON file ``OUT``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from tierlog.client import Cluster, Consumer, Producer, RecordFuture, TopicPartition
from tierlog.client.config import CommonClientConfig, ConsumerConfig, ProducerConfig
from tierlog.client.errors import reason_of
from tierlog.client.security import ChannelSecurity
from tierlog.storage.errors import TierlogError

VALUE_BYTES = 200
CONSUMER_DEADLINE_S = 180  # after the producers' time, in case DONE never comes

Outcomes = Counter[tuple[str, str]]  # (method, status code name) -> calls
_Continue = Callable[..., Any]


class _Counting(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    def __init__(self) -> None:
        self.outcomes: Outcomes = Counter()
        self.lock = threading.Condition()
        self._started = self._finished = 0

    def _count(self, details: grpc.ClientCallDetails, call: Any) -> Any:
        method = details.method.rpartition("/")[2]

        def finished(done: Any) -> None:
            with self.lock:
                self.outcomes[(method, done.code().name)] += 1
                self._finished += 1
                self.lock.notify_all()

        with self.lock:
            self._started += 1
        call.add_done_callback(finished)
        return call

    def wait_finished(self, timeout_s: float) -> None:
        """Until each call counted in has been counted out: a cancelled stream's
        callback runs on gRPC's thread after ``cancel`` returned."""
        with self.lock:
            self.lock.wait_for(lambda: self._finished >= self._started, timeout_s)

    def intercept_unary_unary(self, proceed: _Continue, details: Any, request: Any) -> Any:
        return self._count(details, proceed(details, request))

    def intercept_unary_stream(self, proceed: _Continue, details: Any, request: Any) -> Any:
        return self._count(details, proceed(details, request))

    def intercept_stream_unary(self, proceed: _Continue, details: Any, requests: Any) -> Any:
        return self._count(details, proceed(details, requests))

    def intercept_stream_stream(self, proceed: _Continue, details: Any, requests: Any) -> Any:
        return self._count(details, proceed(details, requests))


class _CountingStreams(grpc.aio.StreamStreamClientInterceptor):
    """The same count for the producer's streams, on their ``grpc.aio`` channels."""

    def __init__(self, counting: _Counting) -> None:
        self._counting = counting
        self._counting_tasks: set[asyncio.Future[None]] = set()

    async def intercept_stream_stream(self, proceed: _Continue, details: Any, requests: Any) -> Any:
        call = await proceed(details, requests)
        method = details.method
        method = (method.decode() if isinstance(method, bytes) else method).rpartition("/")[2]

        async def count(done: Any) -> None:
            code = await done.code()
            with self._counting.lock:
                self._counting.outcomes[(method, code.name)] += 1

        def counted(done: Any) -> None:
            task = asyncio.ensure_future(count(done))
            self._counting_tasks.add(task)  # the loop holds its tasks weakly
            task.add_done_callback(self._counting_tasks.discard)

        call.add_done_callback(counted)
        return call


class CountingCluster(Cluster):
    """A ``Cluster`` whose channels count their calls."""

    def __init__(self, config: CommonClientConfig, request_timeout_ms: int) -> None:
        super().__init__(
            config.bootstrap_servers,
            request_timeout_ms=request_timeout_ms,
            security=ChannelSecurity.from_config(config),
        )
        self.counter = _Counting()
        self.stream_interceptors = (_CountingStreams(self.counter),)
        self._counted: dict[str, grpc.Channel] = {}

    def channel(self, address: str) -> grpc.Channel:
        plain = super().channel(address)
        with self._lock:
            counted = self._counted.get(address)
            if counted is None:
                counted = self._counted[address] = grpc.intercept_channel(plain, self.counter)
            return counted


def _outcomes(cluster: CountingCluster) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for (method, code), count in cluster.counter.outcomes.items():
        found.setdefault(method, {})[code] = count
    return found


def produce(address: str, topic: str, index: int, seconds: float, rate: int, out: Path) -> None:
    config = ProducerConfig.from_properties({"bootstrap.servers": address, "linger.ms": 5})
    cluster = CountingCluster(config, config.request_timeout_ms)
    acked: list[tuple[int, int, str]] = []  # partition, offset, value
    failures: list[str] = []
    lock = threading.Lock()

    def on_done(value: str) -> Callable[[RecordFuture], None]:
        def done(future: RecordFuture) -> None:
            error = future.exception()
            with lock:
                if error is None:
                    metadata = future.result()
                    acked.append((metadata.partition, metadata.offset, value))
                else:
                    failures.append(f"{value}: {error!r}")

        return done

    sent = 0
    with Producer(config, cluster=cluster) as producer:
        start = time.monotonic()
        while (now := time.monotonic()) - start < seconds:
            if sent >= (now - start) * rate:
                time.sleep(0.005)
                continue
            value = f"p{index}-{sent:09d}"
            padded = value.encode().ljust(VALUE_BYTES, b".")
            future = producer.send(topic, padded, key=b"k%d" % (sent % 64))
            future.add_done_callback(on_done(value))
            sent += 1
        producer.flush(60)
    cluster.close()
    summary = {"sent": sent, "acked": acked, "failures": failures, "calls": _outcomes(cluster)}
    out.write_text(json.dumps(summary))


def consume(
    address: str, topic: str, partitions: list[int], seconds: float, done: Path, out: Path
) -> None:
    config = ConsumerConfig.from_properties(
        {"bootstrap.servers": address, "auto.offset.reset": "earliest"}
    )
    cluster = CountingCluster(config, config.request_timeout_ms)
    records: dict[int, list[tuple[int, str]]] = {p: [] for p in partitions}
    failures: list[str] = []
    next_offset = dict.fromkeys(partitions, 0)
    deadline = time.monotonic() + seconds + CONSUMER_DEADLINE_S
    with Consumer(config, cluster=cluster) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        while time.monotonic() < deadline:
            if done.exists():
                ends = {int(p): end for p, end in json.loads(done.read_text()).items()}
                if all(next_offset[p] >= ends[p] for p in partitions):
                    break
            try:
                polled = consumer.poll(500)
            except TierlogError as error:
                failures.append(f"poll: {reason_of(error)}: {error}")
                continue
            for record in polled:
                if record.offset != next_offset[record.partition]:
                    failures.append(
                        f"partition {record.partition}: offset {record.offset} after "
                        f"{next_offset[record.partition] - 1}"
                    )
                next_offset[record.partition] = record.offset + 1
                value = (record.value or b"").rstrip(b".").decode()
                records[record.partition].append((record.offset, value))
        else:
            failures.append(f"gave up after {seconds + CONSUMER_DEADLINE_S} s at {next_offset}")
    cluster.counter.wait_finished(timeout_s=10)
    cluster.close()
    out.write_text(
        json.dumps({"records": records, "failures": failures, "calls": _outcomes(cluster)})
    )


def main(argv: list[str]) -> None:
    role, address, topic = argv[:3]
    if role == "producer":
        index, seconds, rate, out = argv[3:]
        produce(address, topic, int(index), float(seconds), int(rate), Path(out))
    else:
        partitions, seconds, done, out = argv[3:]
        consume(
            address,
            topic,
            [int(p) for p in partitions.split(",")],
            float(seconds),
            Path(done),
            Path(out),
        )


if __name__ == "__main__":
    main(sys.argv[1:])
