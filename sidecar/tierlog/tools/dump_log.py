"""``tierlog dump-log``: print and check segment files, as Kafka's ``kafka-dump-log.sh`` does.

Output follows Kafka's DumpLogSegments line for line, so habits and scripts built on
the Kafka tool carry over: ``Dumping <file>``, one line per batch (``baseOffset: ...
isvalid: true``), ``| offset: ...`` per record with ``--deep-iteration``, keys and
payloads with ``--print-data-log``, ``offset: N position: N`` per ``.index`` entry,
``timestamp: N offset: N`` per ``.timeindex`` entry and ``version: 0 producerId: N
firstOffset: N lastOffset: N lastStableOffset: N`` per ``.txnindex`` entry (an aborted
transaction).  Problems are collected while the
files are walked and summarised on stderr at the end in Kafka's wording (``Mismatches
in :...``, ``Index offset: X, log offset: Y``...).  Unlike Kafka's tool, the exit status
says whether anything was wrong: 0 all good, 1 the files hold problems (invalid batches,
invalid bytes, index entries that disagree with the log, an index that fails its
sanity check), 2 some file could not be checked at all (missing, unreadable, or of a
kind not supported yet).

The core is ``dump_files`` (and one function per file kind), which yields the stdout
lines and fills a ``DumpReport``; the argparse adapter (``tierlog.cli.dump_log``) only
wires options, progress and streams.  Every file is opened read-only (see
``segment_files``).
"""

from __future__ import annotations

import bisect
import mmap
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.storage.errors import TierlogError
from tierlog.storage.records import (
    NO_SEQUENCE,
    BatchHeader,
    CompressionType,
    ControlRecordType,
    Record,
    crc_is_valid,
    decode_records,
    decompress,
    parse_control_type,
    parse_end_txn_marker,
    parse_header,
)
from tierlog.storage.records.legacy import parse_message
from tierlog.storage.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex
from tierlog.tools.progress import Track, no_progress
from tierlog.tools.segment_files import (
    IndexFile,
    base_offset_of,
    batch_at,
    offset_index_problem,
    open_log,
    read_offset_index,
    read_time_index,
    sibling,
    time_index_problem,
)

__all__ = [
    "DECODERS",
    "KAFKA_MAX_MESSAGE_SIZE",
    "DumpOptions",
    "DumpReport",
    "dump_files",
    "dump_log_file",
    "dump_offset_index",
    "dump_time_index",
    "dump_txn_index",
    "format_batch",
]

KAFKA_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # the Kafka tool's --max-message-size default
RECORD_INDENT = "|"
UNSUPPORTED = {
    ".snapshot": "producer state snapshots (.snapshot) are",
}

Decoder = Callable[[bytes], str]
DECODERS: dict[str, Decoder] = {
    "string": lambda data: data.decode("utf-8", errors="replace"),
    "hex": bytes.hex,
}

LogBytes = bytes | mmap.mmap


@dataclass(frozen=True)
class DumpOptions:
    deep_iteration: bool = False
    print_data_log: bool = False  # implies deep iteration
    skip_record_metadata: bool = False
    index_sanity_only: bool = False
    verify_index_only: bool = False
    max_message_size: int = KAFKA_MAX_MESSAGE_SIZE  # largest batch an index check reads
    max_bytes: int | None = None  # stop a .log dump after this many bytes of batches
    key_decoder: str = "string"
    value_decoder: str = "string"

    @property
    def deep(self) -> bool:
        return self.deep_iteration or self.print_data_log


Pairs = dict[Path, list[tuple[int, int]]]


def _pairs() -> Pairs:
    return defaultdict(list)


@dataclass
class DumpReport:
    """What the walk found wrong, per file, plus a few counts for summaries."""

    invalid_batches: dict[Path, list[BatchHeader]] = field(
        default_factory=lambda: defaultdict(list)
    )
    invalid_bytes: dict[Path, str] = field(default_factory=dict)
    undecodable: dict[Path, list[str]] = field(default_factory=lambda: defaultdict(list))
    index_mismatches: Pairs = field(default_factory=_pairs)  # (index offset, log offset)
    time_mismatches: Pairs = field(default_factory=_pairs)  # (index ts, log max ts)
    out_of_order: Pairs = field(default_factory=_pairs)  # (index ts, previous index ts)
    offsets_not_found: Pairs = field(default_factory=_pairs)  # (index offset, found offset)
    failed_sanity: dict[Path, str] = field(default_factory=dict)
    non_consecutive: Pairs = field(default_factory=_pairs)  # a warning: compaction does this
    errors: list[str] = field(default_factory=list)  # files that could not be checked
    batches: int = 0
    records: int = 0
    index_entries: int = 0

    def problems(self) -> list[str]:
        """One phrase per kind of problem found, e.g. ``2 invalid batches``; empty if none."""
        counts = [
            (sum(map(len, self.invalid_batches.values())), "invalid batch", "invalid batches"),
            (len(self.invalid_bytes), "file with invalid bytes", "files with invalid bytes"),
            (sum(map(len, self.undecodable.values())), "undecodable batch", "undecodable batches"),
            (sum(map(len, self.index_mismatches.values())), "index mismatch", "index mismatches"),
            (
                sum(map(len, self.time_mismatches.values())),
                "time index timestamp mismatch",
                "time index timestamp mismatches",
            ),
            (
                sum(map(len, self.out_of_order.values())),
                "out of order time index timestamp",
                "out of order time index timestamps",
            ),
            (
                sum(map(len, self.offsets_not_found.values())),
                "time index offset not found",
                "time index offsets not found",
            ),
            (len(self.failed_sanity), "index failing its sanity check", "indexes failing"),
        ]
        return [f"{n} {one if n == 1 else many}" for n, one, many in counts if n]

    @property
    def exit_code(self) -> int:
        if self.problems():
            return 1
        return 2 if self.errors else 0

    def stderr_lines(self) -> Iterator[str]:
        """The end-of-run summary, in Kafka's words where Kafka has words for it."""
        for path, headers in self.invalid_batches.items():
            yield f"Invalid batches in {path}"
            for h in headers:
                yield f"  position: {h.position} offsets: {h.base_offset}..{h.last_offset}"
        for path, reason in self.invalid_bytes.items():
            yield f"Invalid bytes in {path}: {reason}"
        for path, reasons in self.undecodable.items():
            yield f"Undecodable batches in {path}"
            yield from (f"  {reason}" for reason in reasons)
        for path, pairs in self.index_mismatches.items():
            yield f"Mismatches in :{path}"
            yield from (f"  Index offset: {i}, log offset: {o}" for i, o in pairs)
        for path, pairs in self.time_mismatches.items():
            yield f"Found timestamp mismatch in :{path}"
            yield from (f"  Index timestamp: {i}, log timestamp: {t}" for i, t in pairs)
        for path, pairs in self.out_of_order.items():
            yield f"Found out of order timestamp in :{path}"
            yield from (
                f"  Index timestamp: {i}, Previously indexed timestamp: {p}" for i, p in pairs
            )
        for path, pairs in self.offsets_not_found.items():
            yield f"The following indexed offsets are not found in the log ({path})."
            yield from (f"Indexed offset: {i}, found log offset: {o}" for i, o in pairs)
        for path, reason in self.failed_sanity.items():
            yield f"{path} failed sanity check: {reason} (a tierlog broker rebuilds it at start-up)"
        for path, pairs in self.non_consecutive.items():
            yield f"Non-consecutive offsets in {path}"
            yield from (f"  {first} is followed by {second}" for first, second in pairs)
        yield from self.errors
        problems = self.problems()
        if problems:
            yield f"dump-log found problems: {', '.join(problems)}"
        elif self.errors:
            yield f"dump-log could not check {len(self.errors)} file(s)"


# -- the walk --------------------------------------------------------------------------


def dump_files(
    paths: Iterable[Path], options: DumpOptions, report: DumpReport, track: Track = no_progress
) -> Iterator[str]:
    """Dump each file by its kind (``.log``, ``.index``, ``.timeindex``), in order."""
    for path in paths:
        yield f"Dumping {path}"
        yield from _dump_one(path, options, report, track)


def _dump_one(path: Path, options: DumpOptions, report: DumpReport, track: Track) -> Iterator[str]:
    suffix = path.suffix
    if suffix in UNSUPPORTED:
        report.errors.append(
            f"{path}: {UNSUPPORTED[suffix]} not supported by dump-log yet; skipped"
        )
        return
    dumpers = {
        ".log": dump_log_file,
        ".index": dump_offset_index,
        ".timeindex": dump_time_index,
        TXN_INDEX_SUFFIX: dump_txn_index,
    }
    dumper = dumpers.get(suffix)
    if dumper is None:
        report.errors.append(f"Ignoring unknown file {path}")
        return
    try:
        yield from dumper(path, options, report, track)
    except (OSError, ValueError) as error:
        report.errors.append(f"{path}: {error}")


def dump_log_file(
    path: Path, options: DumpOptions, report: DumpReport, track: Track = no_progress
) -> Iterator[str]:
    """Every batch of a ``.log`` (and with ``options.deep`` every record), as Kafka prints them."""
    if path.name.split(".", 1)[0].isdigit():  # a renamed copy still dumps, without this line
        yield f"Log starting offset: {base_offset_of(path)}"
    with open_log(path) as log:
        size = len(log)
        limit = size if options.max_bytes is None else min(size, options.max_bytes)
        position, reason = 0, ""
        previous_offset: int | None = None
        with track(path.name, limit, "B") as advance:
            while position < limit:
                try:
                    header = parse_header(log, position)
                except TierlogError as error:
                    reason = str(error)
                    break
                if header.end_position > size:
                    reason = (
                        f"the batch at {position} declares {header.size} bytes, the file ends first"
                    )
                    break
                if header.end_position > limit:
                    break  # --max-bytes: the next batch does not fit
                valid = crc_is_valid(log, header)
                report.batches += 1
                if not valid:
                    report.invalid_batches[path].append(header)
                yield format_batch(header, valid)
                if options.deep:
                    for line, offset in _record_lines(path, log, header, options, report):
                        if previous_offset is not None and offset != previous_offset + 1:
                            report.non_consecutive[path].append((previous_offset, offset))
                        previous_offset = offset
                        yield line
                position = header.end_position
                advance(header.size)
        if position < size and (options.max_bytes is None or reason):
            yield f"Found {size - position} invalid bytes at the end of {path.name}"
            report.invalid_bytes[path] = (
                f"{size - position} bytes from position {position}: {reason or 'a partial batch'}"
            )


def _timestamp_label(header: BatchHeader) -> str:
    return "NoTimestampType" if header.magic == 0 else header.timestamp_type.value


def _codec_name(codec: CompressionType) -> str:
    return codec.name.lower()


def format_batch(header: BatchHeader, valid: bool) -> str:
    """One batch in Kafka's DumpLogSegments words (v2, or a v0/v1 message)."""
    h = header
    tail = (
        f" position: {h.position} {_timestamp_label(h)}: {h.max_timestamp} size: {h.size}"
        f" magic: {h.magic} compresscodec: {_codec_name(h.compression)} crc: {h.crc}"
        f" isvalid: {_bool(valid)}"
    )
    if h.magic < 2:
        return f"offset: {h.last_offset}{tail}"
    horizon = (
        "OptionalLong.empty"
        if h.delete_horizon_ms is None
        else f"OptionalLong[{h.delete_horizon_ms}]"
    )
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count}"
        f" baseSequence: {h.base_sequence} lastSequence: {h.last_sequence}"
        f" producerId: {h.producer_id} producerEpoch: {h.producer_epoch}"
        f" partitionLeaderEpoch: {h.partition_leader_epoch}"
        f" isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)}"
        f" deleteHorizonMs: {horizon}{tail}"
    )


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _record_lines(
    path: Path, log: LogBytes, header: BatchHeader, options: DumpOptions, report: DumpReport
) -> Iterator[tuple[str, int]]:
    """``(line, offset)`` for each record of the batch; an undecodable batch is reported."""
    try:
        records = decode_records(log, header)
        legacy_crcs = _legacy_crcs(log, header) if header.magic < 2 else []
    except TierlogError as error:
        report.undecodable[path].append(f"position {header.position}: {error}")
        yield f"{RECORD_INDENT} records could not be decoded: {error}", header.last_offset
        return
    key_decoder = DECODERS[options.key_decoder]
    value_decoder = DECODERS[options.value_decoder]
    for i, record in enumerate(records):
        report.records += 1
        parts = [] if options.skip_record_metadata else _record_metadata(header, record)
        if header.magic < 2 and not options.skip_record_metadata:
            parts.append(f"isValid: true crc: {legacy_crcs[i]}")
        if header.is_control and not options.skip_record_metadata:
            parts.append(_control_description(record))
        if options.print_data_log and not header.is_control:
            parts += _record_data(record, key_decoder, value_decoder)
        yield f"{RECORD_INDENT} {' '.join(parts)}", record.offset


def _record_metadata(header: BatchHeader, record: Record) -> list[str]:
    parts = [
        f"offset: {record.offset} {_timestamp_label(header)}: {record.timestamp}"
        f" keySize: {_size(record.key)} valueSize: {_size(record.value)}"
    ]
    if header.magic >= 2:
        keys = ",".join(key for key, _ in record.headers)
        parts.append(f"sequence: {_sequence(header, record)} headerKeys: [{keys}]")
    return parts


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _sequence(header: BatchHeader, record: Record) -> int:
    if header.base_sequence < 0:
        return NO_SEQUENCE
    return (header.base_sequence + record.offset - header.base_offset) % 2**31


def _control_description(record: Record) -> str:
    try:
        control_type = parse_control_type(record.key)
        if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            marker = parse_end_txn_marker(record)
            return (
                f"endTxnMarker: {marker.control_type.name}"
                f" coordinatorEpoch: {marker.coordinator_epoch}"
            )
    except TierlogError as error:
        return f"controlType: invalid ({error})"
    if isinstance(control_type, ControlRecordType):
        return f"controlType: {control_type.name}({control_type.value})"
    return f"controlType: UNKNOWN({control_type})"


def _record_data(record: Record, key_decoder: Decoder, value_decoder: Decoder) -> list[str]:
    parts = []
    if record.key is not None:
        parts.append(f"key: {key_decoder(record.key)}")
    if record.value is not None:
        parts.append(f"payload: {value_decoder(record.value)}")
    if record.headers:
        shown = ",".join(
            f"{key}={'null' if value is None else value_decoder(value)}"
            for key, value in record.headers
        )
        parts.append(f"headers: [{shown}]")
    return parts


def _legacy_crcs(log: LogBytes, header: BatchHeader) -> list[int]:
    """The CRC of each message of a v0/v1 entry: itself, or a wrapper's inner messages."""
    message, _ = parse_message(log, header.position)
    if message.compression is CompressionType.NONE or message.value is None:
        return [message.crc]
    inner = decompress(message.compression, message.value, magic=message.magic)
    crcs, cursor = [], 0
    while cursor < len(inner):
        item, cursor = parse_message(inner, cursor)
        crcs.append(item.crc)
    return crcs


# -- indexes ---------------------------------------------------------------------------


def _log_beside(index_path: Path) -> Path:
    log_path = sibling(index_path, ".log")
    if not log_path.exists():
        raise FileNotFoundError(f"no log file {log_path.name} beside the index")
    return log_path


def _log_end_offset(log: LogBytes, index: IndexFile) -> int:
    """One past the last offset in the log, walking from the last indexed batch (as the
    broker's check does) or from the start when that entry points at no batch."""
    live = index.live_entries
    position = live[-1].value if live and batch_at(log, live[-1].value) is not None else 0
    end_offset = index.base_offset
    while (header := batch_at(log, position)) is not None:
        end_offset = header.last_offset + 1
        position = header.end_position
    return end_offset


def dump_offset_index(
    path: Path, options: DumpOptions, report: DumpReport, track: Track = no_progress
) -> Iterator[str]:
    """``offset: N position: N`` per entry, each checked against the batch it points at.

    An entry must point at the position of a batch whose last offset is the entry's
    offset (the segment indexes a batch by its last offset, as Kafka does).
    """
    index = read_offset_index(path)
    with open_log(_log_beside(path)) as log:
        if not index.entries:
            yield f"{path} is empty."
            return
        if options.index_sanity_only:
            problem = offset_index_problem(index, len(log), _log_end_offset(log, index))
            yield from _sanity_outcome(path, problem, report)
            return
        entries = index.live_entries
        with track(path.name, len(entries), "entries") as advance:
            for entry in entries:
                header = batch_at(log, entry.value)
                report.index_entries += 1
                if header is not None and header.size > options.max_message_size:
                    report.errors.append(
                        f"{path}: the batch at position {entry.value} is {header.size} bytes, "
                        f"above --max-message-size {options.max_message_size}; not verified"
                    )
                elif header is None or header.last_offset != entry.key:
                    log_offset = -1 if header is None else header.last_offset
                    report.index_mismatches[path].append((entry.key, log_offset))
                if not options.verify_index_only:
                    yield f"offset: {entry.key} position: {entry.value}"
                advance(1)


def dump_txn_index(
    path: Path, options: DumpOptions, report: DumpReport, track: Track = no_progress
) -> Iterator[str]:
    """One line per aborted transaction, as Kafka prints them, whatever the options (a
    missing file is an empty index, as for Kafka)."""
    try:
        entries = TransactionIndex(path, base_offset_of(path)).entries()
    except TierlogError as error:
        report.errors.append(f"{path}: {error}")
        return
    for entry in entries:
        report.index_entries += 1
        yield (
            f"version: 0 producerId: {entry.producer_id} firstOffset: {entry.first_offset} "
            f"lastOffset: {entry.last_offset} lastStableOffset: {entry.last_stable_offset}"
        )


def _sanity_outcome(path: Path, problem: str | None, report: DumpReport) -> Iterator[str]:
    if problem is None:
        yield f"{path} passed sanity check."
    else:
        report.failed_sanity[path] = problem


def dump_time_index(
    path: Path, options: DumpOptions, report: DumpReport, track: Track = no_progress
) -> Iterator[str]:
    """``timestamp: N offset: N`` per entry, each checked against the log.

    An entry must name the last offset of a batch whose largest record timestamp is
    the entry's timestamp, and timestamps must strictly increase from entry to entry.
    """
    index = read_time_index(path)
    offset_index_path = sibling(path, ".index")
    positions = read_offset_index(offset_index_path) if offset_index_path.exists() else None
    with open_log(_log_beside(path)) as log:
        if not index.entries:
            yield f"{path} is empty."
            return
        if options.index_sanity_only:
            yield from _sanity_outcome(path, time_index_problem(index, len(log)), report)
            return
        entries = index.live_entries
        previous_timestamp = -1
        with track(path.name, len(entries), "entries") as advance:
            for entry in entries:
                report.index_entries += 1
                _check_time_entry(path, log, positions, entry.key, entry.value, report)
                if previous_timestamp >= entry.key:
                    report.out_of_order[path].append((entry.key, previous_timestamp))
                if not options.verify_index_only:
                    yield f"timestamp: {entry.key} offset: {entry.value}"
                previous_timestamp = entry.key
                advance(1)


def _check_time_entry(
    path: Path,
    log: LogBytes,
    positions: IndexFile | None,
    timestamp: int,
    offset: int,
    report: DumpReport,
) -> None:
    header = _batch_holding(log, _floor_position(positions, offset), offset)
    if header is None or header.last_offset != offset:
        found = -1 if header is None else header.last_offset
        report.offsets_not_found[path].append((offset, found))
        return
    try:
        max_timestamp = max(record.timestamp for record in decode_records(log, header))
    except TierlogError as error:
        report.undecodable[path].append(f"position {header.position}: {error}")
        return
    if max_timestamp != timestamp:
        report.time_mismatches[path].append((timestamp, max_timestamp))


def _floor_position(positions: IndexFile | None, offset: int) -> int:
    """Where to start looking for ``offset``: the offset index's floor entry, else 0."""
    if positions is None:
        return 0
    entries: Sequence[tuple[int, int]] = positions.live_entries
    slot = bisect.bisect_right(entries, offset, key=lambda entry: entry[0]) - 1
    return entries[slot][1] if slot >= 0 else 0


def _batch_holding(log: LogBytes, position: int, offset: int) -> BatchHeader | None:
    """The first batch from ``position`` on whose last offset is >= ``offset``."""
    while (header := batch_at(log, position)) is not None:
        if header.last_offset >= offset:
            return header
        position = header.end_position
    return None
