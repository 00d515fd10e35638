"""Kafka's sparse segment indexes: ``.index`` (offset -> position) and ``.timeindex``.

Both are arrays of fixed-size big-endian entries in a memory-mapped file, written in
increasing key order, so a lookup is a binary search for the largest entry whose key
is <= the target. While a segment is active its index file is preallocated to
``segment.index.bytes`` (rounded down to whole entries) and only the first ``entries``
slots are meaningful; when the segment rolls or closes the file is trimmed to exactly
those entries, which is what Kafka's tools and a Kafka broker expect to find.

Searches look at the newest entries first (the "warm section", Kafka's 8 KiB of tail
entries): consumers near the log end keep hitting the same few pages, so those stay
in the page cache while a plain binary search would touch cold pages each time.

A crash can leave an index longer than its valid entries or pointing past the log;
recovery detects that with ``sanity_check`` and rebuilds the index from the log.
"""

from __future__ import annotations

import mmap
import operator
import os
import struct
import sys
from abc import ABC, abstractmethod
from array import array
from pathlib import Path
from typing import ClassVar, NamedTuple

from tierlog.storage.errors import CorruptRecordError

__all__ = ["IndexEntry", "OffsetIndex", "SegmentIndex", "TimeIndex"]

WARM_SECTION_BYTES = 8192
NO_TIMESTAMP = -1


class IndexEntry(NamedTuple):
    key: int  # absolute offset (offset index) or timestamp (time index)
    value: int  # file position (offset index) or absolute offset (time index)


class SegmentIndex(ABC):
    """Shared machinery of both indexes: the mmap, its growth, search and trimming."""

    entry_size: ClassVar[int]
    _entry: ClassVar[struct.Struct]
    _key: ClassVar[struct.Struct]  # the entry's first field, the one searches compare

    @property
    def _key_bias(self) -> int:
        """What to add to the stored key field to get the key (offsets are relative)."""
        return 0

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int, *, writable: bool):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(max_index_bytes // self.entry_size, 1)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        length = os.fstat(self._fd).st_size
        self.entries = length // self.entry_size
        self._mmap: mmap.mmap | None = None
        if writable:
            self.resize(self.max_entries * self.entry_size)
        else:
            self._map(length)
        self._refresh_last_key()

    # -- file and mapping -------------------------------------------------------------

    def _map(self, length: int) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        if length > 0:
            self._mmap = mmap.mmap(self._fd, length)

    def resize(self, length_bytes: int) -> None:
        """Make the file hold ``length_bytes`` rounded down to whole entries (pre-allocation)."""
        length = max(length_bytes // self.entry_size, self.entries) * self.entry_size
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        os.ftruncate(self._fd, length)
        self._map(length)

    def trim_to_valid_size(self) -> None:
        """Cut the preallocated tail: the file holds exactly the valid entries."""
        self.resize(self.entries * self.entry_size)

    def flush(self) -> None:
        if self._mmap is not None:
            self._mmap.flush()

    def close(self) -> None:
        self.trim_to_valid_size()
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        os.close(self._fd)

    def delete(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        os.close(self._fd)
        self.path.unlink(missing_ok=True)

    def rename_to(self, path: Path) -> None:
        """Rename the file (suffix changes for deletion or swapping); the mapping stays valid."""
        self.path.replace(path)
        self.path = path

    def reset(self) -> None:
        """Drop every entry, keeping the preallocation (used before a rebuild)."""
        self.truncate_to_entries(0)

    def truncate_to_entries(self, entries: int) -> None:
        self.entries = max(0, min(entries, self.entries))
        self._refresh_last_key()

    def _refresh_last_key(self) -> None:
        # Kept in memory so appends can check ordering without reading the mapping.
        self.last_key: int | None = self._key_at(self.entries - 1) if self.entries else None

    # -- entries ----------------------------------------------------------------------

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * self.entry_size

    @abstractmethod
    def entry(self, slot: int) -> IndexEntry: ...

    def _key_at(self, slot: int) -> int:
        assert self._mmap is not None
        key: int = self._key.unpack_from(self._mmap, slot * self.entry_size)[0]
        return key + self._key_bias

    @abstractmethod
    def sanity_check(self, log_size_bytes: int) -> None:
        """Raise CorruptRecordError when the file cannot be a valid index of its segment."""

    def _check_length(self) -> None:
        length = os.fstat(self._fd).st_size
        if length % self.entry_size:
            raise CorruptRecordError(
                f"{self.path}: length {length} is not a multiple of {self.entry_size}"
            )

    def last_entry(self) -> IndexEntry | None:
        return self.entry(self.entries - 1) if self.entries else None

    def _write(self, key: int, key_field: int, value_field: int) -> None:
        if self.entries >= self.max_entries:
            raise CorruptRecordError(f"append to a full index {self.path}")
        if self._mmap is None or len(self._mmap) < (self.entries + 1) * self.entry_size:
            self.resize(self.max_entries * self.entry_size)
        assert self._mmap is not None
        self._entry.pack_into(self._mmap, self.entries * self.entry_size, key_field, value_field)
        self.entries += 1
        self.last_key = key

    def floor_slot(self, key: int) -> int:
        """Slot of the largest entry with key <= ``key``, or -1 when there is none."""
        entries = self.entries
        if entries == 0 or self._key_at(0) > key:
            return -1
        warm_entries = WARM_SECTION_BYTES // self.entry_size
        first_warm = max(0, entries - 1 - warm_entries)
        if self._key_at(first_warm) <= key:
            return self._search(key, first_warm, entries - 1)
        return self._search(key, 0, first_warm)

    def _search(self, key: int, low: int, high: int) -> int:
        # A tight loop over the raw field: a full-index lookup takes ~21 probes.
        mapped, unpack, stride = self._mmap, self._key.unpack_from, self.entry_size
        assert mapped is not None
        target = key - self._key_bias
        while low < high:
            middle = (low + high + 1) >> 1
            if unpack(mapped, middle * stride)[0] <= target:
                low = middle
            else:
                high = middle - 1
        return low


class OffsetIndex(SegmentIndex):
    """``.index``: 8-byte entries of (offset - base_offset: int32, position: int32)."""

    entry_size = 8
    _entry = struct.Struct(">ii")
    _key = struct.Struct(">i")

    @property
    def _key_bias(self) -> int:
        return self.base_offset

    def entry(self, slot: int) -> IndexEntry:
        assert self._mmap is not None
        relative, position = self._entry.unpack_from(self._mmap, slot * 8)
        return IndexEntry(self.base_offset + relative, position)

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); offsets must strictly increase."""
        if self.last_key is not None and offset <= self.last_key:
            raise CorruptRecordError(
                f"index offset {offset} is not above the last one {self.last_key} in {self.path}"
            )
        self._write(offset, offset - self.base_offset, position)

    def lookup(self, offset: int) -> IndexEntry:
        """The entry to start scanning from for ``offset``: (base offset, 0) when none."""
        slot = self.floor_slot(offset)
        return IndexEntry(self.base_offset, 0) if slot < 0 else self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry for an offset >= ``offset``."""
        slot = self.floor_slot(offset)
        if slot >= 0 and self._key_at(slot) == offset:
            self.truncate_to_entries(slot)
        else:
            self.truncate_to_entries(slot + 1)

    def sanity_check(self, log_size_bytes: int) -> None:
        self._check_length()
        if not self.entries:
            return
        assert self._mmap is not None
        fields = array("i", self._mmap[: self.size_bytes])
        if sys.byteorder == "little":
            fields.byteswap()
        relatives, positions = fields[0::2], fields[1::2]
        if not (
            relatives[0] >= 0
            and positions[0] >= 0
            and positions[-1] < log_size_bytes
            and _strictly_increasing(relatives)
            and _strictly_increasing(positions)
        ):
            raise CorruptRecordError(f"{self.path}: entries out of order or past the log")


class TimeIndex(SegmentIndex):
    """``.timeindex``: 12-byte entries of (timestamp: int64, offset - base_offset: int32).

    Entries only ever grow strictly in timestamp; each points at the last offset of the
    batch that first carried that timestamp, as Kafka's tools verify.
    """

    entry_size = 12
    _entry = struct.Struct(">qi")
    _key = struct.Struct(">q")

    def entry(self, slot: int) -> IndexEntry:
        assert self._mmap is not None
        timestamp, relative = self._entry.unpack_from(self._mmap, slot * 12)
        return IndexEntry(timestamp, self.base_offset + relative)

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if the timestamp is newer than the last entry's."""
        if self.is_full and not skip_full_check:
            raise CorruptRecordError(f"append to a full time index {self.path}")
        if self.last_key is not None and timestamp <= self.last_key:
            return
        if self.is_full:  # the closing entry of a full index: Kafka grows the file by one
            self.max_entries += 1
        self._write(timestamp, timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> IndexEntry:
        """Largest (timestamp, offset) at or below ``timestamp``; (-1, base offset) if none."""
        slot = self.floor_slot(timestamp)
        return IndexEntry(NO_TIMESTAMP, self.base_offset) if slot < 0 else self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry pointing at an offset >= ``offset`` (entries grow in offset too)."""
        low, high = 0, self.entries
        while low < high:  # first slot whose offset is >= ``offset``
            middle = (low + high) >> 1
            if self.entry(middle).value < offset:
                low = middle + 1
            else:
                high = middle
        self.truncate_to_entries(low)

    def sanity_check(self, log_size_bytes: int) -> None:
        self._check_length()
        if not self.entries:
            return
        assert self._mmap is not None
        timestamps, relatives = zip(
            *self._entry.iter_unpack(self._mmap[: self.size_bytes]), strict=True
        )
        if not (
            log_size_bytes > 0
            and relatives[0] >= 0
            and _strictly_increasing(timestamps)
            and all(map(operator.le, relatives, relatives[1:]))
        ):
            raise CorruptRecordError(f"{self.path}: entries out of order")


def _strictly_increasing(values: array[int] | tuple[int, ...]) -> bool:
    return all(map(operator.lt, values, values[1:]))
