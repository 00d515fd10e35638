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

__all__ = ["TxnWriter", "transactions_in"]


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
