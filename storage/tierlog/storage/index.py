"""Kafka's sparse segment indexes: ``.index`` (offset -> position) and ``.timeindex``.

Both are arrays of fixed-size big-endian entries in a memory-mapped file, written in
increasing key order, so a lookup is a binary search for the largest entry whose key
is <= the target. While a segment is active its index file is preallocated to
``segment.index.bytes`` (rounded down to whole entries) and only the first ``entries``
slots are meaningful; when the segment rolls or closes the file is trimmed to exactly
those entries, which is what Kafka's tools and a Kafka broker expect to find.

The preallocation is sparse, as Kafka's (``RandomAccessFile.setLength``): a new
partition costs no disk for the index pages it has not filled, where real blocks for
two 10 MiB files per partition filled disks at topic creation. A page without blocks,
stored into through the mapping on a full disk, is a SIGBUS that kills the process;
so blocks are reserved (``reserve``, a page at a time) before an entry is stored in a
page not yet reserved, and a full disk is a ``KafkaStorageError`` instead. The
segment reserves for a whole append before it writes the log, so that error leaves
the log as it was.

Searches look at the newest entries first (the "warm section", Kafka's 8 KiB of tail
entries): consumers near the log end keep hitting the same few pages, so those stay
in the page cache while a plain binary search would touch cold pages each time.

A crash can leave an index longer than its valid entries or pointing past the log;
recovery detects that with ``sanity_check`` and rebuilds the index from the log. The
index of a segment that was being written when the broker died is still preallocated:
its tail is a hole, and on a filesystem that gives a mapped hole a page even to read it
(tmpfs) a full disk makes that first read a SIGBUS. So recovery reads such a file
without mapping it and cuts it to the entries it keeps (``keep_synced_prefix``) before
the index is opened.
"""

from __future__ import annotations

import contextlib
import mmap
import operator
import os
import struct
import sys
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import ClassVar, NamedTuple

from tierlog.storage.errors import CorruptRecordError, KafkaStorageError
from tierlog.storage.file_records import storage_error

__all__ = [
    "IndexEntry",
    "OffsetIndex",
    "SegmentIndex",
    "TimeIndex",
    "floor_slot",
    "offset_index_lookup",
    "offset_index_problem",
    "time_index_lookup",
    "time_index_problem",
]

WARM_SECTION_BYTES = 8192
_PREFIX_CHUNK_BYTES = 64 * 1024
NO_TIMESTAMP = -1

IndexBuffer = bytes | bytearray | memoryview | mmap.mmap

# Entry layouts, big-endian: the first field is the key searches compare.
_OFFSET_ENTRY = struct.Struct(">ii")  # offset - base offset, position
_OFFSET_KEY = struct.Struct(">i")
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, offset - base offset
_TIME_KEY = struct.Struct(">q")


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

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_bytes: int,
        *,
        writable: bool,
        read_only: bool = False,
    ):
        """Open (creating if need be) an index; ``writable`` preallocates it for appends.

        ``read_only`` opens an existing file that is never changed, not even trimmed on
        close (tools inspecting a crashed broker's files, or files they cannot write).
        It reads the file once instead of mapping it: the broker writing that file may
        trim it at any moment, and touching a mapped page past the new end of a file
        kills the reading process with SIGBUS.
        """
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(max_index_bytes // self.entry_size, 1)
        self.read_only = read_only and not writable
        self._buffer: IndexBuffer | None = None
        self._reserved_bytes = 0  # a prefix of the file known to have its blocks
        with self._file(create=not self.read_only) as fd:
            if self.read_only:
                self._buffer = _read_whole(fd)
                length = len(self._buffer)
            else:
                length = os.fstat(fd).st_size
                if not writable:
                    self._map(fd, length)
            self.entries = length // self.entry_size
        if writable:
            self.resize(self.max_entries * self.entry_size)
        self._refresh_last_key()

    # -- file and mapping -------------------------------------------------------------

    @contextlib.contextmanager
    def _file(self, *, create: bool = False) -> Iterator[int]:
        # The index holds no descriptor of its own between calls: the mapping keeps the
        # file, so a segment costs one descriptor for its log and none for its indexes
        # beyond the mapping's, and dropping the mapping releases everything.
        flags = os.O_RDONLY if self.read_only else os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(self.path, flags, 0o644)
        try:
            yield fd
        finally:
            os.close(fd)

    def _map(self, fd: int, length: int) -> None:
        # Swap the new mapping in; never close the old one here. Readers search without
        # the log's lock (a roll trims the index under their feet), and the old mapping
        # stays valid for every entry they can see until its last reference goes.
        self._buffer = mmap.mmap(fd, length, access=mmap.ACCESS_WRITE) if length > 0 else None

    def resize(self, length_bytes: int) -> None:
        """Make the file hold ``length_bytes`` rounded down to whole entries (pre-allocation,
        sparse: growing allocates no blocks)."""
        length = max(length_bytes // self.entry_size, self.entries) * self.entry_size
        with self._file() as fd:
            current = os.fstat(fd).st_size
            try:
                os.ftruncate(fd, length)
            except OSError as error:
                self._map(fd, min(current, os.fstat(fd).st_size))
                raise KafkaStorageError(
                    f"cannot size {self.path} to {length} bytes: {error}"
                ) from error
            self._map(fd, length)
        self._reserved_bytes = min(self._reserved_bytes, length)

    def reserve(self, entries: int) -> None:
        """Give the pages of the first ``entries`` slots (as far as the file goes) real
        blocks, so storing those entries through the mapping cannot fault; raises
        KafkaStorageError when the disk has no room for them."""
        needed = entries * self.entry_size
        if needed <= self._reserved_bytes:  # the common case: a page lasts hundreds of entries
            return
        length = len(self._buffer) if isinstance(self._buffer, mmap.mmap) else 0
        end = min(-(-needed // mmap.PAGESIZE) * mmap.PAGESIZE, length)
        if end <= self._reserved_bytes:
            return
        with self._file() as fd:
            try:
                os.posix_fallocate(fd, self._reserved_bytes, end - self._reserved_bytes)
            except OSError as error:
                raise storage_error(error, self.path) from error
        self._reserved_bytes = end

    @classmethod
    def _cut_after_prefix(
        cls, path: Path, keeps: Callable[[tuple[int, int]], bool]
    ) -> tuple[int, int] | None:
        """Cut the file after its longest prefix of stored entries that ``keeps`` accepts
        (called in order, so it may check each entry against the one before); the last
        entry kept, as stored. Reads in chunks, without a mapping, and stops at the first
        entry refused: a preallocated tail of zeros costs one chunk."""
        kept, last = 0, None
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return None
        try:
            done = False
            while not done and (chunk := os.pread(fd, _PREFIX_CHUNK_BYTES, kept * cls.entry_size)):
                whole = len(chunk) // cls.entry_size * cls.entry_size
                done = whole < len(chunk) or whole == 0
                for fields in cls._entry.iter_unpack(chunk[:whole]):
                    if not keeps(fields):
                        done = True
                        break
                    kept, last = kept + 1, fields
            os.ftruncate(fd, kept * cls.entry_size)
        finally:
            os.close(fd)
        return last

    def trim_to_valid_size(self) -> None:
        """Cut the preallocated tail: the file holds exactly the valid entries."""
        self.resize(self.entries * self.entry_size)

    def flush(self) -> None:
        if isinstance(self._buffer, mmap.mmap):
            self._buffer.flush()

    def close(self) -> None:
        if not self.read_only:
            self.trim_to_valid_size()
        self._buffer = None  # unmapped when the last reader lets go of it

    def delete(self) -> None:
        self._buffer = None
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
        assert self._buffer is not None
        key: int = self._key.unpack_from(self._buffer, slot * self.entry_size)[0]
        return key + self._key_bias

    @abstractmethod
    def columns(self) -> tuple[Sequence[int], Sequence[int]]:
        """Every entry's key and value as two columns (bulk decoding, for checks)."""

    @property
    def length_bytes(self) -> int:
        return self.path.stat().st_size

    def last_entry(self) -> IndexEntry | None:
        return self.entry(self.entries - 1) if self.entries else None

    def _write(self, key: int, key_field: int, value_field: int) -> None:
        if self.entries >= self.max_entries:
            raise CorruptRecordError(f"append to a full index {self.path}")
        if self._buffer is None or len(self._buffer) < (self.entries + 1) * self.entry_size:
            self.resize(self.max_entries * self.entry_size)
        assert isinstance(self._buffer, mmap.mmap)
        self.reserve(self.entries + 1)
        self._entry.pack_into(self._buffer, self.entries * self.entry_size, key_field, value_field)
        self.entries += 1
        self.last_key = key

    def floor_slot(self, key: int) -> int:
        """Slot of the largest entry with key <= ``key``, or -1 when there is none."""
        if self.entries == 0:
            return -1
        assert self._buffer is not None
        return floor_slot(
            self._buffer, self.entries, self.entry_size, self._key, key - self._key_bias
        )


class OffsetIndex(SegmentIndex):
    """``.index``: 8-byte entries of (offset - base_offset: int32, position: int32)."""

    entry_size = 8
    _entry = _OFFSET_ENTRY
    _key = _OFFSET_KEY

    @property
    def _key_bias(self) -> int:
        return self.base_offset

    def entry(self, slot: int) -> IndexEntry:
        assert self._buffer is not None
        relative, position = self._entry.unpack_from(self._buffer, slot * 8)
        return IndexEntry(self.base_offset + relative, position)

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); offsets must strictly increase."""
        if self.last_key is not None and offset <= self.last_key:
            raise CorruptRecordError(
                f"index offset {offset} is not above the last one {self.last_key} in {self.path}"
            )
        self._write(offset, offset - self.base_offset, position)

    @classmethod
    def keep_synced_prefix(
        cls, path: Path, base_offset: int, below_offset: int, log_size_bytes: int
    ) -> IndexEntry | None:
        """Before the file is opened after a crash: keep the entries for offsets below
        ``below_offset`` (the recovery point: they were synced with the batches they point
        at) as long as they are in order and inside the log; the last one kept, if any."""
        previous = (-1, -1)

        def keeps(fields: tuple[int, int]) -> bool:
            nonlocal previous
            relative, position = fields
            in_order = previous[0] < relative and previous[1] < position < log_size_bytes
            if not (in_order and base_offset + relative < below_offset):
                return False
            previous = fields
            return True

        last = cls._cut_after_prefix(path, keeps)
        return None if last is None else IndexEntry(base_offset + last[0], last[1])

    def lookup(self, offset: int) -> IndexEntry:
        """The entry to start scanning from for ``offset``: (base offset, 0) when none."""
        return offset_index_lookup(self._buffer or b"", self.base_offset, offset, self.entries)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry for an offset >= ``offset``."""
        slot = self.floor_slot(offset)
        if slot >= 0 and self._key_at(slot) == offset:
            self.truncate_to_entries(slot)
        else:
            self.truncate_to_entries(slot + 1)

    def columns(self) -> tuple[Sequence[int], Sequence[int]]:
        if not self.entries:
            return [], []
        assert self._buffer is not None
        fields = array("i", self._buffer[: self.size_bytes])
        if sys.byteorder == "little":
            fields.byteswap()
        base = self.base_offset
        return [base + relative for relative in fields[0::2]], fields[1::2]

    def sanity_check(self, log_size_bytes: int, log_end_offset: int) -> None:
        """Raise CorruptRecordError when this cannot be the index of its segment's log."""
        offsets, positions = self.columns()
        problem = offset_index_problem(
            self.base_offset,
            self.length_bytes,
            offsets,
            positions,
            log_size_bytes=log_size_bytes,
            log_end_offset=log_end_offset,
        )
        if problem:
            raise CorruptRecordError(f"{self.path}: {problem}")


class TimeIndex(SegmentIndex):
    """``.timeindex``: 12-byte entries of (timestamp: int64, offset - base_offset: int32).

    Entries only ever grow strictly in timestamp; each points at the last offset of the
    batch that first carried that timestamp, as Kafka's tools verify.
    """

    entry_size = 12
    _entry = _TIME_ENTRY
    _key = _TIME_KEY

    def entry(self, slot: int) -> IndexEntry:
        assert self._buffer is not None
        timestamp, relative = self._entry.unpack_from(self._buffer, slot * 12)
        return IndexEntry(timestamp, self.base_offset + relative)

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if the timestamp is newer than the last entry's."""
        if self.is_full and not skip_full_check:
            raise CorruptRecordError(f"append to a full time index {self.path}")
        # An empty index's last entry is (NO_TIMESTAMP, base offset), as Kafka's: a
        # segment without timestamps (v0, or records stamped -1) indexes nothing.
        if timestamp <= (NO_TIMESTAMP if self.last_key is None else self.last_key):
            return
        if self.is_full:  # the closing entry of a full index: Kafka grows the file by one
            self.max_entries += 1
        self._write(timestamp, timestamp, offset - self.base_offset)

    @classmethod
    def keep_synced_prefix(
        cls, path: Path, base_offset: int, up_to_offset: int
    ) -> IndexEntry | None:
        """Before the file is opened after a crash: keep the entries written up to the
        offset index's last kept entry (those pointing at an offset at or below
        ``up_to_offset``: each later entry's timestamp came from a later batch) as long as
        they are in order; the last one kept, if any."""
        previous = (NO_TIMESTAMP, base_offset)

        def keeps(fields: tuple[int, int]) -> bool:
            nonlocal previous
            timestamp, offset = fields[0], base_offset + fields[1]
            if not (timestamp > previous[0] and previous[1] <= offset <= up_to_offset):
                return False
            previous = (timestamp, offset)
            return True

        last = cls._cut_after_prefix(path, keeps)
        return None if last is None else IndexEntry(last[0], base_offset + last[1])

    @classmethod
    def read_last_entry(cls, path: Path, base_offset: int) -> IndexEntry | None:
        """The file's last whole entry, read without mapping it (None if empty or absent)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            whole = os.fstat(fd).st_size // cls.entry_size * cls.entry_size
            if whole == 0:
                return None
            timestamp, relative = cls._entry.unpack(
                os.pread(fd, cls.entry_size, whole - cls.entry_size)
            )
            return IndexEntry(timestamp, base_offset + relative)
        finally:
            os.close(fd)

    def lookup(self, timestamp: int) -> IndexEntry:
        """Largest (timestamp, offset) at or below ``timestamp``; (-1, base offset) if none."""
        return time_index_lookup(self._buffer or b"", self.base_offset, timestamp, self.entries)

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

    def columns(self) -> tuple[Sequence[int], Sequence[int]]:
        if not self.entries:
            return [], []
        assert self._buffer is not None
        base = self.base_offset
        decoded = self._entry.iter_unpack(self._buffer[: self.size_bytes])
        timestamps, offsets = zip(*((ts, base + rel) for ts, rel in decoded), strict=True)
        return timestamps, offsets

    def sanity_check(self, log_size_bytes: int) -> None:
        """Raise CorruptRecordError when this cannot be the time index of its segment."""
        timestamps, offsets = self.columns()
        problem = time_index_problem(
            self.base_offset,
            self.length_bytes,
            timestamps,
            offsets,
            log_size_bytes=log_size_bytes,
        )
        if problem:
            raise CorruptRecordError(f"{self.path}: {problem}")


# -- searches over index bytes -----------------------------------------------------------
# Pure functions over a buffer of entries (a mapped file, or a remote segment's index
# fetched into memory), so the broker's local lookups and the tier's remote ones are
# one implementation.


def _read_whole(fd: int) -> bytes:
    """The file's bytes as they are now, however its writer resizes it meanwhile."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def floor_slot(
    buffer: IndexBuffer, entries: int, entry_size: int, key_field: struct.Struct, raw_key: int
) -> int:
    """Slot of the largest of the first ``entries`` entries whose stored key field (the
    first field, ``key_field``) is <= ``raw_key``; -1 when there is none.

    The newest entries (the warm section) are searched first, so lookups near the log
    end keep touching the same few pages.
    """
    if entries == 0 or key_field.unpack_from(buffer, 0)[0] > raw_key:
        return -1
    warm_entries = WARM_SECTION_BYTES // entry_size
    first_warm = max(0, entries - 1 - warm_entries)
    if key_field.unpack_from(buffer, first_warm * entry_size)[0] <= raw_key:
        return _search(buffer, entry_size, key_field, raw_key, first_warm, entries - 1)
    return _search(buffer, entry_size, key_field, raw_key, 0, first_warm)


def _search(
    buffer: IndexBuffer,
    stride: int,
    key_field: struct.Struct,
    raw_key: int,
    low: int,
    high: int,
) -> int:
    # A tight loop over the raw field: a full-index lookup takes ~21 probes.
    unpack = key_field.unpack_from
    while low < high:
        middle = (low + high + 1) >> 1
        if unpack(buffer, middle * stride)[0] <= raw_key:
            low = middle
        else:
            high = middle - 1
    return low


def offset_index_lookup(
    buffer: IndexBuffer, base_offset: int, offset: int, entries: int | None = None
) -> IndexEntry:
    """Where to start scanning a segment's log for ``offset``, from its ``.index`` bytes:
    the largest entry at or below it, or (base offset, 0) when none. ``entries``
    defaults to every whole entry in ``buffer`` (a trimmed index)."""
    size = _OFFSET_ENTRY.size
    entries = len(buffer) // size if entries is None else entries
    slot = floor_slot(buffer, entries, size, _OFFSET_KEY, offset - base_offset)
    if slot < 0:
        return IndexEntry(base_offset, 0)
    relative, position = _OFFSET_ENTRY.unpack_from(buffer, slot * size)
    return IndexEntry(base_offset + relative, position)


def time_index_lookup(
    buffer: IndexBuffer, base_offset: int, timestamp: int, entries: int | None = None
) -> IndexEntry:
    """The largest (timestamp, offset) entry of ``.timeindex`` bytes at or below
    ``timestamp``, or (-1, base offset) when none."""
    size = _TIME_ENTRY.size
    entries = len(buffer) // size if entries is None else entries
    slot = floor_slot(buffer, entries, size, _TIME_KEY, timestamp)
    if slot < 0:
        return IndexEntry(NO_TIMESTAMP, base_offset)
    found, relative = _TIME_ENTRY.unpack_from(buffer, slot * size)
    return IndexEntry(found, base_offset + relative)


def offset_index_problem(
    base_offset: int,
    length_bytes: int,
    offsets: Sequence[int],
    positions: Sequence[int],
    *,
    log_size_bytes: int,
    log_end_offset: int,
) -> str | None:
    """Why an ``.index`` cannot belong to its log (so it must be rebuilt), or None.

    Pure, over decoded columns, so the broker's start-up check and ``dump-log
    --index-sanity-check`` apply the very same rules.
    """
    if length_bytes % OffsetIndex.entry_size:
        return f"length {length_bytes} is not a multiple of {OffsetIndex.entry_size}"
    if not offsets:
        return None
    if offsets[0] < base_offset or positions[0] < 0:
        return f"first entry ({offsets[0]}, {positions[0]}) lies before the segment"
    if not _strictly_increasing(offsets):
        return "offsets are not strictly increasing"
    if not _strictly_increasing(positions):
        return "positions are not strictly increasing"
    if positions[-1] >= log_size_bytes:
        return f"last position {positions[-1]} is not below the log size {log_size_bytes}"
    if offsets[-1] >= log_end_offset:
        return f"last offset {offsets[-1]} is not below the log end offset {log_end_offset}"
    return None


def time_index_problem(
    base_offset: int,
    length_bytes: int,
    timestamps: Sequence[int],
    offsets: Sequence[int],
    *,
    log_size_bytes: int,
) -> str | None:
    """Why a ``.timeindex`` cannot belong to its log (so it must be rebuilt), or None."""
    if length_bytes % TimeIndex.entry_size:
        return f"length {length_bytes} is not a multiple of {TimeIndex.entry_size}"
    if not timestamps:
        return None
    if log_size_bytes <= 0:
        return "the index has entries but the log is empty"
    if offsets[0] < base_offset:
        return f"first entry ({timestamps[0]}, {offsets[0]}) lies before the segment"
    if not _strictly_increasing(timestamps):
        return "timestamps are not strictly increasing"
    if not all(map(operator.le, offsets, offsets[1:])):
        return "offsets decrease"
    return None


def _strictly_increasing(values: Sequence[int]) -> bool:
    return all(map(operator.lt, values, values[1:]))
