"""A group member in a process of its own, for tests that ``kill -9`` it
(``test_membership.py``).

``group_worker.py ADDRESS GROUP TOPIC OUT DONE``: subscribes to TOPIC in GROUP (no
auto-commit), and until the file DONE appears: polls, appends each record to OUT as
``R <partition> <offset> <value>``, then commits the positions and appends
``C <partition> <position>`` once the commit is acknowledged (``F`` when it failed: the
member was fenced meanwhile, and the next owner reads those records again); assigned are
``A <partitions...>``, revoked ``V <partitions...>`` (from the callbacks). Lines are
flushed as written, so what OUT holds when the process is killed is what it did. Then
closes (leaves the group).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from tierlog.client import Consumer, TopicPartition
from tierlog.client.groups import OffsetAndMetadata
from tierlog.storage.errors import TierlogError


def _write(out: TextIO, line: str) -> None:
    out.write(line + "\n")
    out.flush()


def main(address: str, group: str, topic: str, out_path: str, done_path: str) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": "false",
            "client.id": f"worker-{Path(out_path).stem}",
        }
    )
    with Path(out_path).open("a", encoding="utf-8") as out:

        def commit(partitions: list[TopicPartition]) -> None:
            positions = {tp: consumer.position(tp) for tp in partitions}
            try:
                consumer.commit({tp: OffsetAndMetadata(p) for tp, p in positions.items()})
            except TierlogError as error:
                _write(out, f"F {error.reason}")
                return
            for tp, position in sorted(positions.items()):
                _write(out, f"C {tp.partition} {position}")

        def assigned(partitions: list[TopicPartition]) -> None:
            _write(out, "A " + " ".join(str(tp.partition) for tp in partitions))

        def revoked(partitions: list[TopicPartition]) -> None:
            _write(out, "V " + " ".join(str(tp.partition) for tp in partitions))

        consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
        _write(out, "S")  # subscribed
        while not Path(done_path).exists():
            records = consumer.poll(100)
            for record in records:
                value = (record.value or b"").decode()
                _write(out, f"R {record.partition} {record.offset} {value}")
            if records:  # before the next poll, where partitions may be revoked
                commit(sorted({TopicPartition(r.topic, r.partition) for r in records}))
        consumer.close()
        _write(out, "E")  # left the group


if __name__ == "__main__":
    main(*sys.argv[1:6])
