"""Producer ids for idempotent producers (Kafka's ``ProducerIdManager``), never reused.

A producer id must be unique in the cluster and never handed out twice, even across
restarts: the broker keys its producer state (``.snapshot`` files) by it, and a
reused id would make a new producer's batches look like an old one's duplicates.

Unique in the cluster without coordination: broker ``node.id`` hands out ids
``n * NODE_ID_SPAN + node.id`` only, so two brokers never meet (node ids are below
``NODE_ID_SPAN``).  Never reused: like Kafka's controller, which grants blocks of
1000, the broker reserves a block of ``n`` by writing its end to
``tierlog-producer-ids.json`` (atomic replace, fsynced) *before* handing out any id
of it; after a crash it starts at the reserved end, skipping what the lost block did
not hand out. The file has a copy in every log dir and the largest end is read, so
neither the order of the log dirs nor a new one listed first makes ids start again.
A broker restored from the tier onto empty log dirs has no such file, but the tier's
producer snapshots hold the lost brokers' ids: the restore reserves past the highest of
them (``reserve_past``), whichever broker's lane it was in, so a new producer is never
taken for a restored one.

An existing producer asking again with its id and epoch gets the epoch bumped
(KIP-360, the idempotent producer's recovery from a sequence gap); at the largest
epoch it gets a fresh id with epoch 0, as Kafka's coordinator does.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

from tierlog.api.errors import InvalidRequestError
from tierlog.storage.checkpoints import atomic_write
from tierlog.storage.errors import InvalidConfigError, KafkaStorageError

__all__ = [
    "BLOCK_SIZE",
    "MAX_EPOCH",
    "NODE_ID_SPAN",
    "PRODUCER_IDS_FILE",
    "ProducerIdManager",
    "reserve_past",
]

PRODUCER_IDS_FILE = "tierlog-producer-ids.json"
BLOCK_SIZE = 1000
NODE_ID_SPAN = 1 << 16
MAX_EPOCH = 2**15 - 1
_VERSION = 1


class ProducerIdManager:
    """Hands out this broker's producer ids; see the module docstring."""

    def __init__(self, log_dirs: Sequence[Path], node_id: int) -> None:
        if not 0 <= node_id < NODE_ID_SPAN:
            raise InvalidConfigError(
                f"producer ids need a node.id in [0, {NODE_ID_SPAN}), not {node_id}"
            )
        self.paths = tuple(log_dir / PRODUCER_IDS_FILE for log_dir in log_dirs)
        self.node_id = node_id
        self._lock = threading.Lock()
        self._next = max((_reserved_end(path) for path in self.paths), default=0)
        self._reserved_end = self._next  # n below this are reserved on disk

    def init_producer_id(self, producer_id: int, epoch: int) -> tuple[int, int]:
        """A new id (``producer_id`` -1) or the same id with the next epoch (blocking:
        may write the file)."""
        if producer_id < -1 or (producer_id >= 0 and not 0 <= epoch <= MAX_EPOCH):
            raise InvalidRequestError(f"producer id {producer_id} epoch {epoch}")
        if producer_id >= 0 and epoch < MAX_EPOCH:
            return producer_id, epoch + 1
        return self._allocate(), 0

    def _allocate(self) -> int:
        with self._lock:
            if self._next >= self._reserved_end:
                end = self._next + BLOCK_SIZE
                _reserve(self.paths, end)
                self._reserved_end = end
            n = self._next
            self._next += 1
        return n * NODE_ID_SPAN + self.node_id


def reserve_past(log_dirs: Sequence[Path], producer_id: int) -> None:
    """Reserve every id up to ``producer_id``'s block in the log dirs (blocking): the next
    id handed out here is above it, in any broker's lane."""
    paths = tuple(log_dir / PRODUCER_IDS_FILE for log_dir in log_dirs)
    end = producer_id // NODE_ID_SPAN + 1
    if max((_reserved_end(path) for path in paths), default=0) < end:
        _reserve(paths, end)


def _reserve(paths: Sequence[Path], end: int) -> None:
    """Every copy says ids below ``end`` are taken (a copy written before a failure
    only skips ids)."""
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps({"version": _VERSION, "next_block_start": end}))


def _reserved_end(path: Path) -> int:
    """The end of the last block reserved in this copy (0 when there is none)."""
    if not path.exists():
        return 0
    try:
        document = json.loads(path.read_text())
        if document.get("version") != _VERSION:
            raise ValueError(f"unknown version {document.get('version')}")
        return int(document["next_block_start"])
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise KafkaStorageError(f"{path} is unreadable: {error!r}") from None
