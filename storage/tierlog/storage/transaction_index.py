"""Kafka's transaction index (``.txnindex``): the aborted transactions of one segment.

An entry is written when an ABORT marker closes a transaction, in the segment the
marker goes to; a transaction may have begun segments earlier. Each entry is 34
big-endian bytes: version (int16, 0), producer id, the transaction's first offset,
its last offset (the marker's) and the last stable offset when it was aborted (the
first offset of the earliest transaction of another producer still open then, or the
marker's offset + 1). A read_committed reader drops the transactional batches of a
producer that lie inside one of its aborted ranges.

The file is not preallocated: it is created by the first append and grows an entry at
a time, so a missing file is an empty index, and a torn tail (a crash mid-append) is
shorter than an entry and ignored. Entries are in marker order (last offsets grow);
the last stable offset lets a search stop early: once an entry's last stable offset
reaches the end of the searched range, no transaction overlapping the range was still
open, so every one that was aborted has already been met.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from tierlog.storage.errors import CorruptRecordError, KafkaStorageError

__all__ = [
    "ENTRY_BYTES",
    "TXN_INDEX_SUFFIX",
    "AbortedTxn",
    "TransactionIndex",
    "TxnIndexSearch",
    "collect_aborted",
    "decode_entries",
    "encode_entries",
    "search_entries",
]

TXN_INDEX_SUFFIX = ".txnindex"
CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = _ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    """One aborted transaction: offsets ``[first_offset, last_offset]`` of ``producer_id``
    (``last_offset`` is its ABORT marker)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(CURRENT_VERSION, *self)

    def overlaps(self, start_offset: int, end_offset: int) -> bool:
        """Whether the transaction has offsets in ``[start_offset, end_offset)``."""
        return self.last_offset >= start_offset and self.first_offset < end_offset


class TxnIndexSearch(NamedTuple):
    """The aborted transactions one index holds for a range, and whether the search may
    stop here (``is_complete``) or must go on into the next segment."""

    aborted: list[AbortedTxn]
    is_complete: bool


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(entry.encode() for entry in entries)


def decode_entries(data: bytes, where: str = "transaction index") -> list[AbortedTxn]:
    """The whole entries in ``data`` (a torn tail is ignored); an entry of an unknown
    version is CorruptRecordError."""
    entries = []
    for position in range(0, len(data) - ENTRY_BYTES + 1, ENTRY_BYTES):
        version, *fields = _ENTRY.unpack_from(data, position)
        if version != CURRENT_VERSION:
            raise CorruptRecordError(
                f"{where}: entry at byte {position} has version {version}, not {CURRENT_VERSION}"
            )
        entries.append(AbortedTxn(*fields))
    return entries


def search_entries(
    entries: Iterable[AbortedTxn], start_offset: int, upper_bound_offset: int
) -> TxnIndexSearch:
    """The entries overlapping ``[start_offset, upper_bound_offset)``; complete as soon as
    one's last stable offset reaches the upper bound."""
    found = []
    for entry in entries:
        if entry.overlaps(start_offset, upper_bound_offset):
            found.append(entry)
        if entry.last_stable_offset >= upper_bound_offset:
            return TxnIndexSearch(found, True)
    return TxnIndexSearch(found, False)


def collect_aborted(
    indexes: Iterable[Sequence[AbortedTxn]], start_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """Kafka's collectAbortedTransactions: search the indexes of the segment holding
    ``start_offset`` and the segments after it, in order, until a search is complete."""
    found: list[AbortedTxn] = []
    for entries in indexes:
        result = search_entries(entries, start_offset, upper_bound_offset)
        found += result.aborted
        if result.is_complete:
            break
    return found


class TransactionIndex:
    """The ``.txnindex`` of the segment at ``base_offset``. Appends come from the log's
    writer (under its lock); reads may run beside them and see whole entries."""

    def __init__(self, path: Path, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self._last_offset: int | None = None  # of the last entry, read on first append

    def entries(self) -> list[AbortedTxn]:
        return decode_entries(self._read(), str(self.path))

    def _read(self) -> bytes:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return b""
        except OSError as error:
            raise KafkaStorageError(f"cannot read {self.path}: {error}") from error

    def append(self, entry: AbortedTxn) -> None:
        """Add ``entry``, whose marker must come after the last entry's."""
        if self._last_offset is None:
            existing = self.entries()
            self._last_offset = existing[-1].last_offset if existing else -1
        if entry.last_offset <= self._last_offset:
            raise ValueError(
                f"{self.path}: aborted transaction ending at {entry.last_offset} does not "
                f"follow the last entry's end {self._last_offset}"
            )
        valid = len(self._read()) // ENTRY_BYTES * ENTRY_BYTES
        try:
            with self.path.open("r+b" if self.path.exists() else "wb") as file:
                file.truncate(valid)  # drop a torn tail before appending after it
                file.seek(valid)
                file.write(entry.encode())
        except OSError as error:
            raise KafkaStorageError(f"cannot append to {self.path}: {error}") from error
        self._last_offset = entry.last_offset

    def search(self, start_offset: int, upper_bound_offset: int) -> TxnIndexSearch:
        return search_entries(self.entries(), start_offset, upper_bound_offset)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        entries = self.entries()
        kept = next(
            (slot for slot, entry in enumerate(entries) if entry.last_offset >= offset),
            None,
        )
        if kept is None:
            return
        self._cut(kept * ENTRY_BYTES)
        self._last_offset = entries[kept - 1].last_offset if kept else -1

    def reset(self) -> None:
        """Empty the index (recovery rebuilds it). An existing file stays, empty."""
        self._cut(0)
        self._last_offset = -1

    def _cut(self, size: int) -> None:
        if not self.path.exists():
            return
        try:
            os.truncate(self.path, size)
        except OSError as error:
            raise KafkaStorageError(f"cannot truncate {self.path}: {error}") from error

    def sanity_check(self) -> None:
        """CorruptRecordError when an entry cannot belong to this segment."""
        data = self._read()
        if len(data) % ENTRY_BYTES:
            raise CorruptRecordError(
                f"{self.path} is {len(data)} bytes, not a whole number of {ENTRY_BYTES}-byte "
                "entries"
            )
        for entry in decode_entries(data, str(self.path)):
            if entry.last_offset < self.base_offset:
                raise CorruptRecordError(
                    f"{self.path}: aborted transaction {entry} ends below the segment's base "
                    f"offset {self.base_offset}"
                )

    def flush(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        except OSError as error:
            raise KafkaStorageError(f"cannot open {self.path}: {error}") from error
        try:
            os.fsync(fd)
        except OSError as error:
            raise KafkaStorageError(f"cannot sync {self.path}: {error}") from error
        finally:
            os.close(fd)

    def rename_to(self, path: Path) -> None:
        if self.path.exists():
            self.path.replace(path)
        self.path = path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
