"""The fault run's workers: a producer and a consumer, each a real process recording its
history (``tests.support.history``) until SIGTERM.

``python -m tests.support.fault_workers produce --servers ADDR --topic T --history DIR
--worker NAME`` sends values ``NAME-0``, ``NAME-1``... (each its own key, so they spread
over the partitions) through an idempotent ``acks=all`` producer, at most
``--in-flight`` unanswered at once; with ``--spread-over N`` value ``k`` goes to partition
``k mod N`` instead, so every one of N partitions (thousands, where keys would leave some
empty for long) gets one value in each N. Every send is recorded before it is made, and its
outcome when it comes:

- ``ok`` with the partition and offset the broker acknowledged;
- ``fail`` only when ``send`` refused the record before queueing it (it never left);
- ``info`` for every other error: after retries a request may well have been stored
  (a timeout, a lost answer, an error after the append), and an acknowledgement without
  an offset (a duplicate older than the broker's cache) is no place to check.

``consume --partitions N`` reads every partition from offset 0 and records each record
it is given, polling again after a retriable error (a broker down or cut off).

SIGTERM stops either one: the producer stops sending and closes, so what is unanswered
ends as ``info`` (or, after ``kill -9``, as an invoke alone: indeterminate too).

A test starts them with ``start_worker`` and waits for progress with ``wait_for_events``.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.history import HISTORY_SUFFIX, NULL_VALUE, HistoryRecorder
from tierlog.client import Consumer, Producer, RecordMetadata, TopicPartition
from tierlog.client.errors import is_retriable

__all__ = [
    "consume",
    "produce",
    "recorded_so_far",
    "start_worker",
    "wait_for_events",
]

REPO = Path(__file__).resolve().parents[2]
POLL_MS = 200
RETRY_BACKOFF_S = 0.1
CLOSE_TIMEOUT_S = 30


def _stop_on_sigterm() -> threading.Event:
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    return stopping


def produce(
    recorder: HistoryRecorder,
    config: dict[str, Any],
    topic: str,
    in_flight: int,
    stopping: threading.Event,
    spread_over: int | None = None,
) -> None:
    window = threading.Semaphore(in_flight)

    def outcome_of(value: str) -> Any:
        def done(metadata: RecordMetadata | None, error: BaseException | None) -> None:
            if error is None and metadata is not None and metadata.offset >= 0:
                recorder.ok(value, metadata.partition, metadata.offset)
            else:
                recorder.info(value, repr(error) if error else "acknowledged without an offset")
            window.release()

        return done

    config = {"acks": "all", "enable.idempotence": True, **config}
    with Producer(config) as producer:
        sent = 0
        while not stopping.is_set():
            if not window.acquire(timeout=0.1):  # a bound on the wait: SIGTERM is seen
                continue
            value = f"{recorder.worker}-{sent}"
            sent += 1
            partition = None if spread_over is None else (sent - 1) % spread_over
            recorder.invoke(value)
            try:
                producer.send(
                    topic,
                    value.encode(),
                    key=value.encode(),
                    partition=partition,
                    callback=outcome_of(value),
                )
            except Exception as error:  # refused before it was queued: it never left
                recorder.fail(value, repr(error))
                window.release()
        producer.close(CLOSE_TIMEOUT_S)


def consume(
    recorder: HistoryRecorder,
    config: dict[str, Any],
    topic: str,
    partitions: int,
    stopping: threading.Event,
) -> None:
    consumer = Consumer(config)
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        for tp in assigned:  # no request: a broker may be down already
            consumer.seek(tp, 0)
        while not stopping.is_set():
            try:
                records = consumer.poll(POLL_MS)
            except Exception as error:
                if not is_retriable(error):
                    raise
                stopping.wait(RETRY_BACKOFF_S)  # a fault: the next poll tries again
                continue
            for record in records:
                value = NULL_VALUE if record.value is None else record.value.decode()
                recorder.read(record.partition, record.offset, value)
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=["produce", "consume"])
    parser.add_argument("--servers", required=True, help="bootstrap.servers")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--history", type=Path, required=True, help="the history directory")
    parser.add_argument("--worker", required=True, help="this worker's name in the history")
    parser.add_argument("--partitions", type=int, default=1, help="consume: how many")
    parser.add_argument("--in-flight", type=int, default=50, help="produce: unanswered sends")
    parser.add_argument(
        "--spread-over", type=int, metavar="N", help="produce: to partition k mod N, not by key"
    )
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    stopping = _stop_on_sigterm()
    config: dict[str, Any] = {"bootstrap.servers": args.servers}
    config |= dict(pair.split("=", 1) for pair in args.config)
    with HistoryRecorder(args.history, args.worker) as recorder:
        if args.role == "produce":
            produce(recorder, config, args.topic, args.in_flight, stopping, args.spread_over)
        else:
            consume(recorder, config, args.topic, args.partitions, stopping)


# -- the test's side ---------------------------------------------------------------------------


def start_worker(
    role: str,
    worker: str,
    history: Path,
    servers: str,
    topic: str,
    partitions: int = 1,
    configs: Sequence[str] = (),
    spread_over: int | None = None,
) -> subprocess.Popen[bytes]:
    """A worker process (``role``: produce or consume) recording into ``history``; a
    producer given ``spread_over`` sends its values to the partitions by turn."""
    command = [sys.executable, "-m", "tests.support.fault_workers", role, "--servers", servers,
               "--topic", topic, "--history", str(history), "--worker", worker,
               "--partitions", str(partitions)]  # fmt: skip
    command += [arg for config in configs for arg in ("--config", config)]
    command += [] if spread_over is None else ["--spread-over", str(spread_over)]
    return subprocess.Popen(command, cwd=REPO)


def recorded_so_far(history: Path, event_type: str = "ok") -> int:
    """How many events of ``event_type`` (``ok``, ``read``...) the workers have written
    (whole lines only: a worker may be writing one as we read)."""
    prefix = f'{{"type":"{event_type}"'
    return sum(
        line.startswith(prefix)
        for path in history.glob(f"*{HISTORY_SUFFIX}")
        for line in path.read_text().splitlines(keepends=True)
        if line.endswith("\n")
    )


def wait_for_events(
    history: Path,
    workers: Sequence[subprocess.Popen[bytes]],
    more: int,
    event_type: str = "ok",
    timeout_s: float = 60,
) -> None:
    """Until ``more`` events of ``event_type`` than now are recorded (by default, that
    many more acknowledgements); fails if a worker dies first."""
    target = recorded_so_far(history, event_type) + more
    deadline = time.monotonic() + timeout_s
    while recorded_so_far(history, event_type) < target:
        assert all(worker.poll() is None for worker in workers), "a worker died"
        assert time.monotonic() < deadline, f"fewer than {target} {event_type} events"
        time.sleep(0.05)


if __name__ == "__main__":
    main()
