"""Issue 29 item 7's figures: the threads of a consumer of 1,000 partitions, and how long
it takes to read one record from each.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.consumer_threads_bench [--python OTHER_PYTHON ...]

One ``tierlog-sidecar`` on 127.0.0.1 holds 4 topics of 250 partitions with one record
each. Each consumer runs in a process of its own (this module with ``--consume``, under
each interpreter given: another checkout's ``.venv/bin/python`` measures its consumer
against the same sidecar), assigned all 1,000 partitions from the earliest offset, and
prints its Python threads (``threading.active_count()``) and the process's tasks
(``/proc/self/task``) before and after reading the 1,000 records.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TOPICS = 4
PARTITIONS_PER_TOPIC = 250


def _threads() -> tuple[int, int]:
    return threading.active_count(), sum(1 for _ in Path("/proc/self/task").iterdir())


def consume(address: str) -> dict[str, object]:
    from tierlog.client import Consumer, TopicPartition

    before = _threads()
    consumer = Consumer({"bootstrap.servers": address, "auto.offset.reset": "earliest"})
    consumer.assign(
        [TopicPartition(f"q{n}", p) for n in range(TOPICS) for p in range(PARTITIONS_PER_TOPIC)]
    )
    records, started = 0, time.monotonic()
    while records < TOPICS * PARTITIONS_PER_TOPIC and time.monotonic() - started < 120:
        records += len(consumer.poll(200))
    elapsed_s = time.monotonic() - started
    after = _threads()
    consumer.close()
    return {
        "records": records,
        "seconds": round(elapsed_s, 2),
        "python_threads": [before[0], after[0]],
        "tasks": [before[1], after[1]],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--consume", metavar="ADDRESS")
    parser.add_argument("--python", action="append", default=[])
    args = parser.parse_args()
    if args.consume:
        print(json.dumps(consume(args.consume)))
        return
    from tests.support.sidecars import start_sidecar
    from tierlog.client import Producer
    from tierlog.client.admin import AdminClient

    with tempfile.TemporaryDirectory() as scratch:
        sidecar = start_sidecar(Path(scratch) / "data")
        try:
            with AdminClient(sidecar.address) as admin:
                for n in range(TOPICS):
                    admin.create_topic(f"q{n}", PARTITIONS_PER_TOPIC, {})
            with Producer({"bootstrap.servers": sidecar.address, "linger.ms": 5}) as producer:
                for n in range(TOPICS):
                    for partition in range(PARTITIONS_PER_TOPIC):
                        producer.send(f"q{n}", b"x", partition=partition)
                producer.flush()
            for python in [sys.executable, *args.python]:
                command = [python, "-m", "tests.benchmarks.consumer_threads_bench"]
                run = subprocess.run(
                    [*command, "--consume", sidecar.address],
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=True,
                )
                print(python, run.stdout.strip())
        finally:
            sidecar.kill()


if __name__ == "__main__":
    main()
