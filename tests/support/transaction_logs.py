"""Transactions written into a stopped sidecar's data dir through the storage engine.

No client can append a COMMIT or ABORT marker (only a transaction coordinator may), so
the tests that read transactions through a real sidecar write them here, with the
sidecar down, as a coordinator and its producers would have: ``TxnWriter`` appends the
batches and keeps what a read_committed reader should see. The log is closed cleanly
(a producer snapshot at its end), and the sidecar started again loads it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.storage.transactions import TxnWriter
from tierlog.storage.config import LogConfig
from tierlog.storage.log import Log

__all__ = ["TxnWriter", "interleaved", "transactions_in"]


@contextlib.contextmanager
def transactions_in(
    data_dir: Path, topic: str, partition: int = 0, config: LogConfig | None = None
) -> Iterator[TxnWriter]:
    """A ``TxnWriter`` over the partition's log in ``data_dir`` (its sidecar stopped)."""
    log = Log.open(data_dir / f"{topic}-{partition}", config or LogConfig())
    try:
        yield TxnWriter(log)
    finally:
        log.close()


def interleaved(writer: TxnWriter, *, aborted_before_open: bool = False) -> int:
    """Three producers' transactions overlapping, plain records between them, producer
    1's second transaction left open; the offset it starts at. ``aborted_before_open``:
    an aborted transaction (data and marker) right before the open one too."""
    writer.send(1)
    writer.send(2)
    writer.send_plain()
    writer.end(1, commit=False)
    writer.send(3)
    writer.send(2)
    writer.end(2, commit=True)
    writer.send(3)
    writer.end(3, commit=False)
    writer.send_plain(2)
    if aborted_before_open:
        writer.send(2)
        writer.end(2, commit=False)
    open_from = writer.log.log_end_offset
    writer.send(1)
    writer.send_plain()
    return open_from
