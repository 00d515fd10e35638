"""What a partition's segments hold of transactions: its markers, read off the files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tierlog.storage.records import iter_batches, read_end_txn_marker

__all__ = ["Marker", "markers"]


@dataclass(frozen=True)
class Marker:
    committed: bool
    producer_id: int
    producer_epoch: int


def markers(partition_dir: Path) -> list[Marker]:
    """Every commit or abort marker in the partition's segments, in log order."""
    found = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        for header in iter_batches(data):
            if header.is_control:
                marker = read_end_txn_marker(data, header)
                found.append(Marker(marker.committed, header.producer_id, header.producer_epoch))
    return found
