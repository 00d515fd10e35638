"""Checks on a produce request's batches, before the log appends them.

The broker appends what the producer built, byte for byte (only base offset and
leader epoch are patched in, and the LogAppendTime stamp if the topic wants it), so
whatever it accepts every later fetch, recovery and cleaning must be able to read.
The header is checked first (whole-batch bounds, magic 2, CRC-32C, the count against
the offset deltas, size limits, codec, producer fields); then every record is decoded,
decompressing if need be, as Kafka's LogValidator does: a CRC only proves the bytes
arrived as the producer built them, not that its records agree with its header.  The
records must fill the section exactly, number ``record_count``, carry offset deltas
0..n-1 in order and timestamps whose max is the header's (the time index trusts it,
and unlike Kafka we do not rewrite it); on CreateTime topics each timestamp must lie
within the topic's bounds, on compacted topics each record needs a key.

The records are walked by the consumer's own loop (``rows.walk_v2_records``), so what
the validator accepts is what readers can read: it reads records one at a time until
two in a row are laid out alike, and a run of alike records (what producers make) is
then checked where it lies with the patterns the consumer decodes it with
(``runs.match_run``), its offset deltas by strided compares and its timestamp deltas
as a set: no Python and no object per record.  A records section that does not
decompress is CORRUPT_MESSAGE; records that do not add up are INVALID_RECORD, Kafka's
``InvalidRecordException``.  The input buffer is never modified.

A compressed section is never decoded whole: a megabyte of zstd can decode to 32 GiB.
It is decoded a chunk at a time (``codecs.decompress_chunks``) and walked through a
window holding the record the last chunk cut and the next chunk
(``rows.walk_v2_window``), each window's rows folded into the batch's checks and
dropped; a record longer than a chunk is gathered whole, as Kafka reads a record,
once its declared length has been checked against the batch's bound and reserved
from the broker's ``inflight.DecompressedBytesBudget``.  The verdict is the one a
whole decode would give.
"""

from __future__ import annotations

from operator import itemgetter

from tierlog.storage.config import TimestampType
from tierlog.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    TierlogError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from tierlog.storage.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LENGTH_OFFSET,
    MAGIC_OFFSET,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    RECORDS_OFFSET,
    V2_HEADER_SIZE,
    BatchHeader,
    parse_header,
    records_section,
)
from tierlog.storage.records.buffers import ReadableBuffer
from tierlog.storage.records.codecs import decoder_window_bytes, decompress_chunks
from tierlog.storage.records.crc import crc32c
from tierlog.storage.records.inflight import DecompressedBytesBudget
from tierlog.storage.records.legacy import LOG_OVERHEAD
from tierlog.storage.records.record import MIN_RECORD_SIZE
from tierlog.storage.records.rows import RecordRow, cut_record_error, walk_v2_window
from tierlog.storage.records.runs import (
    RecordLayout,
    is_checkable,
    match_run,
    offset_deltas_count_up,
    timestamp_deltas,
)
from tierlog.storage.records.varint import decode_varint

__all__ = [
    "MAX_DECOMPRESSION_RATIO",
    "NO_BUDGET",
    "validate_produce",
]

# A compressed batch may decode to at most this many times max.message.bytes (64 MiB for
# the default 1 MiB): room for what compresses best in practice, text and JSON at 5-20x,
# and a bound on the memory one produced batch can claim (zstd reaches 32768x).
MAX_DECOMPRESSION_RATIO = 64

# What a validation without a broker's budget reserves from (tools, tests).
NO_BUDGET = DecompressedBytesBudget(capacity_bytes=2**62, max_wait_ms=0)


def validate_produce(
    buf: ReadableBuffer,
    *,
    max_message_bytes: int,
    require_keys: bool,
    timestamp_type: TimestampType,
    now_ms: int,
    before_max_ms: int,
    after_max_ms: int,
    allow_control: bool = False,
    budget: DecompressedBytesBudget = NO_BUDGET,
    may_wait: bool = True,
) -> list[BatchHeader]:
    """The headers of the v2 batches in ``buf``, or the typed error of the first bad one.

    ``timestamp_type`` is the topic's; only CreateTime topics bound the producer's
    timestamps (``now_ms - before_max_ms <= t <= now_ms + after_max_ms``).
    ``require_keys`` (compacted topics): every record needs a key.  A compressed batch
    that decodes to more than ``MAX_DECOMPRESSION_RATIO * max_message_bytes`` is too large.
    Control batches are refused unless ``allow_control`` (a coordinator's append; Kafka's
    AppendOrigin.COORDINATOR), and then need a producer id; such an append's
    transactional data batches (the group coordinator's offset commits) may carry no
    sequence, as Kafka's do.  A compressed batch is decoded and checked a chunk at a
    time, under ``budget`` (the broker's decompressed bytes in flight); unless
    ``may_wait``, one that would wait for room or decode long raises
    ``ValidationWouldWait`` instead.
    """
    view = memoryview(buf)
    if len(view) == 0:
        raise InvalidRecordError("produce request holds no record batches")
    headers: list[BatchHeader] = []
    pos = 0
    while pos < len(view):
        header = _parse(view, pos)
        _check_batch(view, header, max_message_bytes, allow_control)
        try:
            _check_records(
                buf,
                header,
                max_message_bytes * MAX_DECOMPRESSION_RATIO,
                budget,
                may_wait,
                timestamp_type,
                require_keys,
                now_ms,
                before_max_ms,
                after_max_ms,
            )
        except TierlogError as error:
            raise _without_frames(error) from error.__cause__
        headers.append(header)
        pos = header.end_position
    return headers


def _without_frames(error: TierlogError) -> TierlogError:
    """``error`` (and its causes) without the frames it was raised through: they hold a
    decoder and decoded chunks, which an error kept in a reference cycle (the broker's
    error paths make some) would keep from the allocator until a full collection: a
    burst of refused bombs then left the sidecar some 150 MiB larger."""
    link: BaseException | None = error
    while link is not None:
        link.__traceback__ = None
        link = link.__cause__ or link.__context__
    return error


def _parse(view: memoryview, pos: int) -> BatchHeader:
    remaining = len(view) - pos
    if remaining < LOG_OVERHEAD + 5:
        raise CorruptRecordError(f"{remaining} trailing bytes at {pos} are not a batch")
    magic = view[pos + MAGIC_OFFSET]
    if magic in (0, 1):
        raise UnsupportedForMessageFormatError(f"produce with magic {magic}; only v2 is accepted")
    if magic != 2:
        raise CorruptRecordError(f"unknown magic {magic} at {pos}")
    if remaining < V2_HEADER_SIZE:
        raise CorruptRecordError(f"batch header at {pos} is truncated to {remaining} bytes")
    try:
        header = parse_header(view, pos)
    except UnsupportedCompressionTypeError:
        # A garbled attributes byte is corruption; only a sound batch names a bad codec.
        if not _raw_crc_matches(view, pos):
            raise CorruptRecordError(f"batch at {pos} fails its CRC") from None
        raise
    if header.end_position > len(view):
        raise CorruptRecordError(
            f"batch at {pos} declares {header.size} bytes, only {remaining} remain"
        )
    return header


def _raw_crc_matches(view: memoryview, pos: int) -> bool:
    length = int.from_bytes(view[pos + LENGTH_OFFSET : pos + LENGTH_OFFSET + 4], "big")
    end = pos + LOG_OVERHEAD + length
    if end > len(view):
        return False
    stored = int.from_bytes(view[pos + CRC_OFFSET : pos + CRC_OFFSET + 4], "big")
    return crc32c(view[pos + ATTRIBUTES_OFFSET : end]) == stored


def _check_batch(
    view: memoryview, header: BatchHeader, max_message_bytes: int, allow_control: bool
) -> None:
    # Messages are built only on failure: this runs for every produced batch.
    if header.base_offset != 0:
        raise InvalidRecordError(
            f"{_where(header)}: a produced batch has base offset 0, not {header.base_offset}"
        )
    if header.size > max_message_bytes:
        raise RecordTooLargeError(
            f"{_where(header)}: {header.size} bytes exceed max.message.bytes={max_message_bytes}"
        )
    if crc32c(view[header.position + ATTRIBUTES_OFFSET : header.end_position]) != header.crc:
        raise CorruptRecordError(f"{_where(header)} fails its CRC")
    count = header.record_count
    last_offset_delta = header.last_offset - header.base_offset
    if last_offset_delta < 0:
        raise InvalidRecordError(f"{_where(header)}: invalid offset range (last offset delta < 0)")
    if count <= 0:
        raise InvalidRecordError(f"{_where(header)}: invalid record count {count}")
    if last_offset_delta != count - 1:
        raise InvalidRecordError(
            f"{_where(header)}: last offset delta {last_offset_delta} disagrees with "
            f"record count {count}"
        )
    if not header.compression and count * MIN_RECORD_SIZE > header.size - RECORDS_OFFSET:
        raise InvalidRecordError(
            f"{_where(header)}: {count} records cannot fit in its {header.size} bytes"
        )
    if header.is_control and not allow_control:
        raise InvalidRecordError(f"{_where(header)}: producers may not write control batches")
    if header.is_control and header.producer_id == NO_PRODUCER_ID:
        raise InvalidRecordError(f"{_where(header)}: control batch without a producer id")
    if header.producer_id != NO_PRODUCER_ID or header.is_transactional:
        _check_producer(header, _where(header), from_coordinator=allow_control)


def _where(header: BatchHeader) -> str:
    return f"batch at {header.position}"


def _check_producer(header: BatchHeader, where: str, *, from_coordinator: bool) -> None:
    if header.producer_id < NO_PRODUCER_ID:
        raise InvalidRecordError(f"{where}: invalid producer id {header.producer_id}")
    if header.producer_id == NO_PRODUCER_ID:
        if header.is_transactional:
            raise InvalidRecordError(f"{where}: transactional batch without a producer id")
        return
    if header.producer_epoch < 0:
        raise InvalidRecordError(f"{where}: invalid producer epoch {header.producer_epoch}")
    # Markers carry no sequence, nor do a coordinator's transactional offset commits.
    if header.base_sequence < 0 and not header.is_control and not from_coordinator:
        raise InvalidRecordError(f"{where}: invalid sequence number {header.base_sequence}")


_OFFSET, _TIMESTAMP, _KEY = itemgetter(0), itemgetter(1), itemgetter(2)


class _RecordChecks:
    """The validator's ``RunTaker``: a run of alike records is checked where it lies
    (structure by one match, offset deltas by strided compares, timestamp deltas
    gathered as a set), so nothing is made per record; the records read one at a time
    come back as rows, whose offsets are checked here each time a run begins.  A
    window's rows are folded into what the batch's checks need (``absorb``) and
    dropped, so a streamed section is never held here either."""

    def __init__(self, header: BatchHeader) -> None:
        self.header = header
        self.run_timestamp_deltas: set[int] = set()
        self.without_keys = False
        self.highest_timestamp: int | None = None
        self.lowest_timestamp: int | None = None  # of those that have one
        self.checked_rows = 0  # rows of the window's careful loop checked so far
        self.next_index = 0  # index of the first record not yet checked

    def __call__(
        self,
        rows: list[RecordRow],
        data: bytes,
        pos: int,
        end: int,
        layout: RecordLayout,
        limit: int,
        index: int,
    ) -> tuple[int, int]:
        self.check_rows(rows, index)
        if not is_checkable(layout):
            return 0, pos
        count = match_run(data, pos, end, layout, limit)
        if count == 0:
            return 0, pos
        if not offset_deltas_count_up(data, pos, count, layout, index):
            raise InvalidRecordError(
                f"{_where(self.header)}: records {index} to {index + count - 1} do not carry "
                "the offset deltas of their places; a produced batch's are 0, 1, 2... in order"
            )
        self.run_timestamp_deltas |= timestamp_deltas(data, pos, count, layout)
        self.without_keys = self.without_keys or layout.key_size < 0
        self.next_index = index + count
        return count, pos + count * layout.record_size

    def check_rows(self, rows: list[RecordRow], up_to: int) -> None:
        """The rows read since the last run are the records ``next_index`` to ``up_to``:
        their offset deltas must be their places.  (The log assigns base offset + delta to
        each record and indexes the batch by its last offset: other deltas would give
        records offsets their batch does not own.)"""
        offset_deltas = list(map(_OFFSET, rows[self.checked_rows :]))
        if offset_deltas != list(range(self.next_index, up_to)):
            wrong = next(i for i, delta in enumerate(offset_deltas, self.next_index) if delta != i)
            raise InvalidRecordError(
                f"{_where(self.header)}: record {wrong} has offset delta "
                f"{offset_deltas[wrong - self.next_index]}; a produced batch's are 0, 1, 2... "
                "in order"
            )
        self.checked_rows = len(rows)
        self.next_index = up_to

    def absorb(self, rows: list[RecordRow], up_to: int) -> None:
        """A window's walk is over, its records before ``up_to``: keep what the batch's
        checks need of its rows."""
        self.check_rows(rows, up_to)
        self.checked_rows = 0
        if not rows:
            return
        self.timestamps_seen(list(map(_TIMESTAMP, rows)))
        self.without_keys = self.without_keys or None in map(_KEY, rows)

    def timestamps_seen(self, timestamps: list[int]) -> None:
        highest = max(timestamps)
        if self.highest_timestamp is None or highest > self.highest_timestamp:
            self.highest_timestamp = highest
        lowest = min(filter(_HAS_TIMESTAMP, timestamps), default=None)
        if lowest is not None and (self.lowest_timestamp is None or lowest < self.lowest_timestamp):
            self.lowest_timestamp = lowest

    def timestamp_bounds(self) -> tuple[int, int]:
        """The highest timestamp of the records, and the lowest but for NO_TIMESTAMP."""
        base = self.header.base_timestamp
        if self.run_timestamp_deltas:
            self.timestamps_seen([base + delta for delta in self.run_timestamp_deltas])
        lowest = NO_TIMESTAMP if self.lowest_timestamp is None else self.lowest_timestamp
        assert self.highest_timestamp is not None  # a batch holds a record or is refused
        return self.highest_timestamp, lowest


def _check_records(
    buf: ReadableBuffer,
    header: BatchHeader,
    max_decompressed_bytes: int,
    budget: DecompressedBytesBudget,
    may_wait: bool,
    timestamp_type: TimestampType,
    require_keys: bool,
    now_ms: int,
    before_max_ms: int,
    after_max_ms: int,
) -> None:
    checks = _RecordChecks(header)
    if header.is_compressed:
        _walk_compressed(buf, header, max_decompressed_bytes, budget, may_wait, checks)
    else:
        data, start, end = records_section(buf, header)
        _walk(data, start, end, checks, final=True)
    if header.timestamp_type is TimestampType.CREATE_TIME:
        highest, lowest = checks.timestamp_bounds()
        _check_max_timestamp(header, highest)
        if timestamp_type is TimestampType.CREATE_TIME:
            _check_timestamp(highest, now_ms, before_max_ms, after_max_ms)
            _check_timestamp(lowest, now_ms, before_max_ms, after_max_ms)
    if require_keys and checks.without_keys:
        raise InvalidRecordError(
            f"{_where(header)}: a record has no key; compacted topics require one"
        )


def _walk(data: bytes, pos: int, size: int, checks: _RecordChecks, *, final: bool) -> int:
    """Check the records that lie whole in ``data[pos:size]``; the position of the first
    one cut by its end.  ``final``: the section ends there, so none may be cut."""
    header = checks.header
    try:
        # Offsets and timestamps as deltas: base offset 0 is checked, base timestamp kept.
        rows, pos, index = walk_v2_window(
            data,
            pos,
            size,
            checks.next_index,
            header.record_count,
            0,
            header.base_timestamp,
            None,
            checks,
        )
        checks.absorb(rows, index)
        if final and index < header.record_count:
            raise cut_record_error(data, pos, size)
    except CorruptRecordError as exc:  # intact bytes (the CRC held) that do not add up
        # Without its traceback: it would hold the window (and this frame, a cycle).
        raise InvalidRecordError(f"{_where(header)}: {exc}") from exc.with_traceback(None)
    return pos


def _walk_compressed(
    buf: ReadableBuffer,
    header: BatchHeader,
    max_decompressed_bytes: int,
    budget: DecompressedBytesBudget,
    may_wait: bool,
    checks: _RecordChecks,
) -> None:
    """Check the records of a compressed batch as they are decoded, a chunk at a time:
    a window holds the record the last chunk cut and the next chunk; a record longer
    than a chunk is gathered whole (its length known first, so its room is reserved,
    or it is refused, before it is decoded)."""
    section = memoryview(buf)[header.position + RECORDS_OFFSET : header.end_position]
    chunks = decompress_chunks(
        header.compression,
        section,
        max_bytes=max_decompressed_bytes,
        chunk_bytes=budget.chunk_bytes,
    )
    decoder_bytes = decoder_window_bytes(header.compression, section)
    # A window, the chunks gathered for the next, and the next being joined.
    chunk_bytes = budget.chunk_bytes
    with budget.reserve(decoder_bytes + 3 * chunk_bytes, may_wait=may_wait) as reservation:
        window = b""
        pos = 0
        gathered: list[bytes] = []
        gathered_bytes = needed_bytes = 0
        try:
            for chunk in chunks:
                reservation.decoded(len(chunk))
                gathered.append(chunk)
                gathered_bytes += len(chunk)
                if gathered_bytes < max(needed_bytes, chunk_bytes):
                    continue  # small pieces (snappy's blocks) are walked a chunk at a time
                window = _joined(window, pos, gathered)
                gathered.clear()
                pos = _walk(window, 0, len(window), checks, final=False)
                gathered_bytes = len(window) - pos
                needed_bytes = _record_bytes(window, pos, max_decompressed_bytes, header)
                reservation.grow_to(decoder_bytes + 2 * needed_bytes + 2 * chunk_bytes)
            window = _joined(window, pos, gathered)
            _walk(window, 0, len(window), checks, final=True)
        finally:
            # An error's traceback keeps this frame: it must not keep the decoder and
            # the window too (nor count on a garbage collection to free them).
            chunks.close()
            window = chunk = b""
            gathered.clear()


def _joined(window: bytes, pos: int, gathered: list[bytes]) -> bytes:
    """The next window: what is left of this one from ``pos``, and the chunks gathered
    (the one chunk as it is when nothing is left: most windows, no copy)."""
    if pos == len(window) and len(gathered) == 1:
        return gathered[0]
    return b"".join((memoryview(window)[pos:], *gathered))


def _record_bytes(window: bytes, pos: int, max_decompressed_bytes: int, header: BatchHeader) -> int:
    """The bytes of the record the window cuts at ``pos`` (0 if it does not know yet);
    MESSAGE_TOO_LARGE if that is more than the batch may decode to."""
    try:
        length, records_at = decode_varint(window, pos)
    except (CorruptRecordError, IndexError):  # cut inside its length: the next chunk tells
        return 0
    record_bytes = records_at - pos + length
    if record_bytes > max_decompressed_bytes:
        raise RecordTooLargeError(
            f"{_where(header)}: a record of {record_bytes} bytes is more than its batch may "
            f"decode to ({max_decompressed_bytes})"
        )
    return record_bytes


def _check_max_timestamp(header: BatchHeader, records_max: int) -> None:
    if records_max != header.max_timestamp:
        raise InvalidRecordError(
            f"{_where(header)}: max timestamp {header.max_timestamp} is not its records' "
            f"max, {records_max}"
        )


_HAS_TIMESTAMP = NO_TIMESTAMP.__ne__


def _check_timestamp(timestamp: int, now_ms: int, before_max_ms: int, after_max_ms: int) -> None:
    """Kafka's bounds on every record of a CreateTime batch on a CreateTime topic."""
    if timestamp == NO_TIMESTAMP:
        return
    if now_ms - timestamp > before_max_ms or timestamp - now_ms > after_max_ms:
        raise InvalidTimestampError(
            f"timestamp {timestamp} is outside [{now_ms - before_max_ms}, "
            f"{now_ms + after_max_ms}] (now {now_ms})"
        )
