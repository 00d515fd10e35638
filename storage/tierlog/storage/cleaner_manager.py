"""Kafka's LogCleanerManager and LogCleaner: which log to compact next, and the threads.

For each compacted log (``cleanup.policy`` holding ``compact``) that is neither being
cleaned nor paused:

- the **first dirty offset** is its entry in the log dir's ``cleaner-offset-checkpoint``,
  or the log start when it has none, lies below the log start, or lies past the log end
  (the log was truncated under it); for a tiered log, never below the tier's end (the
  local copies of tiered segments are left to local retention and the tier's cleaner:
  ``cleaner.local_cleaning_floor``), and nothing is dirty until that end is known here
  (after a start, once the tier is claimed or the leader said where it ends);
- the **first uncleanable offset** is the active segment's base offset, or, with
  ``min.compaction.lag.ms``, the base of the first dirty segment holding a record
  younger than the lag (a segment's largest timestamp, or its mtime without one);
- its **dirty ratio** is the bytes in ``[first dirty, first uncleanable)`` over those
  bytes plus the clean bytes before them; it **needs compaction now** when the first
  batch of its first dirty segment is older than ``max.compaction.lag.ms``.

A cleaner thread takes the log with the highest ratio above its
``min.cleanable.dirty.ratio``, or any that needs compaction now, marks it in progress,
runs one ``Cleaner`` round, and checkpoints the round's end offset. With nothing to
clean it waits ``log.cleaner.backoff.ms``. ``abort_and_pause`` (for a truncation or a
deletion of the partition) stops a round between batches and keeps the log out of the
cleaner until ``resume``.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from tierlog.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    read_offset_checkpoint_or_warn,
    write_offset_checkpoint,
)
from tierlog.storage.cleaner import (
    Cleaner,
    CleanerStats,
    LogCleaningAbortedError,
    local_cleaning_floor,
    segments_to_clean,
)
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.log import Log
from tierlog.storage.rate_limit import TokenBucket
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "CLEANER_KEYS",
    "CleanerConfig",
    "LogCleaner",
    "LogCleanerManager",
    "LogToClean",
    "PartitionLogs",
    "cleanable_offsets",
    "worth_cleaning",
]

logger = logging.getLogger(__name__)

# Every partition the broker holds: (partition, its log, the log dir holding it).
PartitionLogs = Callable[[], Iterable[tuple[TopicPartition, Log, Path]]]


# Kafka's broker settings of the cleaner -> CleanerConfig fields.
CLEANER_KEYS = {
    "log.cleaner.enable": "enable",
    "log.cleaner.threads": "threads",
    "log.cleaner.dedupe.buffer.size": "dedupe_buffer_size",
    "log.cleaner.io.buffer.size": "io_buffer_size",
    "log.cleaner.backoff.ms": "backoff_ms",
    "log.cleaner.io.max.bytes.per.second": "io_max_bytes_per_second",
}


@dataclass(frozen=True)
class CleanerConfig:
    """Kafka's broker-level ``log.cleaner.*`` settings."""

    enable: bool = True  # log.cleaner.enable
    threads: int = 1  # log.cleaner.threads
    dedupe_buffer_size: int = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size, all threads
    io_buffer_size: int = 512 * 1024  # log.cleaner.io.buffer.size
    backoff_ms: int = 15_000  # log.cleaner.backoff.ms
    # log.cleaner.io.max.bytes.per.second: what all cleaning reads and writes together,
    # local and tiered (Kafka's default, the largest double: no limit).
    io_max_bytes_per_second: float = math.inf

    def __post_init__(self) -> None:
        if self.threads < 0:
            raise InvalidConfigError("log.cleaner.threads must be >= 0")
        if self.dedupe_buffer_size < 1024 * 1024:
            raise InvalidConfigError("log.cleaner.dedupe.buffer.size must be >= 1 MiB")
        if self.io_buffer_size < 1 or self.backoff_ms < 0:
            raise InvalidConfigError("log.cleaner.io.buffer.size and backoff.ms are too small")
        if not self.io_max_bytes_per_second > 0:
            raise InvalidConfigError("log.cleaner.io.max.bytes.per.second must be above 0")

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> CleanerConfig:
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in props.items():
            if key not in CLEANER_KEYS:
                raise InvalidConfigError(f"unknown cleaner config {key!r}")
            name, text = CLEANER_KEYS[key], str(raw).strip().lower()
            try:
                values[name] = _PARSERS[str(types[name])](text)
            except ValueError:
                raise InvalidConfigError(f"invalid value {raw!r} for {key}") from None
        return cls(**values)

    @property
    def dedupe_buffer_per_thread(self) -> int:
        return self.dedupe_buffer_size // max(self.threads, 1)

    def throttle(self) -> TokenBucket | None:
        """The one bucket every cleaner of the broker draws on; None without a limit.
        Kafka's largest double, its default, reads as no limit too."""
        rate = self.io_max_bytes_per_second
        return TokenBucket(rate) if rate < _NO_LIMIT else None


# Field types (as annotations name them) -> how a property's text reads as one.
_PARSERS: dict[str, Callable[[str], object]] = {
    "bool": lambda text: text == "true",
    "int": int,
    "float": float,
}
_NO_LIMIT = sys.float_info.max  # Double.MAX_VALUE, Kafka's "no limit"


@dataclass(frozen=True)
class LogToClean:
    """A compacted log and what a round over it would cover (Kafka's LogToClean)."""

    tp: TopicPartition
    log: Log
    log_dir: Path
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool

    @property
    def cleanable_ratio(self) -> float:
        return cleanable_ratio(self.clean_bytes, self.cleanable_bytes)

    @property
    def is_cleanable(self) -> bool:
        return worth_cleaning(
            self.clean_bytes,
            self.cleanable_bytes,
            self.needs_compaction_now,
            self.log.config.min_cleanable_dirty_ratio,
        )


def cleanable_ratio(clean_bytes: int, cleanable_bytes: int) -> float:
    """The dirty ratio: cleanable bytes over them plus the clean bytes before them."""
    total = clean_bytes + cleanable_bytes
    return cleanable_bytes / total if total else 0.0


def worth_cleaning(
    clean_bytes: int, cleanable_bytes: int, needs_compaction_now: bool, min_dirty_ratio: float
) -> bool:
    """Kafka's rule: something to clean, and either due by ``max.compaction.lag.ms`` or
    dirtier than ``min.cleanable.dirty.ratio`` (the local log's and the tier's)."""
    if cleanable_bytes <= 0:
        return False
    return needs_compaction_now or cleanable_ratio(clean_bytes, cleanable_bytes) > min_dirty_ratio


def cleanable_offsets(log: Log, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, needs compaction now) of ``log``."""
    active = log.active_segment
    start = max(log.log_start_offset, local_cleaning_floor(log))
    first_dirty = checkpoint if checkpoint is not None else start
    if first_dirty < start or first_dirty > active.base_offset:
        first_dirty = start  # a truncation passed it, or retention did, or the tier
    dirty = [s for s in segments_to_clean(log) if s.next_offset > first_dirty]
    first_uncleanable = active.base_offset
    config = log.config
    if config.min_compaction_lag_ms > 0:
        for segment in dirty:
            if segment.largest_timestamp > now_ms - config.min_compaction_lag_ms:
                first_uncleanable = segment.base_offset
                break
    needs_now = False
    if dirty and config.max_compaction_lag_ms < 2**63 - 1:
        first = dirty[0].log.header_at(0)
        first_timestamp = first.header.max_timestamp if first else -1
        needs_now = 0 < first_timestamp < now_ms - config.max_compaction_lag_ms
    return first_dirty, max(first_uncleanable, first_dirty), needs_now


class LogCleanerManager:
    """Cleaner checkpoints and the in-progress and paused partitions."""

    def __init__(self, log_dirs: Iterable[Path], logs: PartitionLogs):
        self.log_dirs = tuple(log_dirs)
        self._logs = logs
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        self._in_progress: set[TopicPartition] = set()
        self._aborting: set[TopicPartition] = set()
        self._paused: dict[TopicPartition, int] = {}
        self._changed = threading.Condition()

    def load_checkpoints(self) -> None:
        with self._changed:
            for log_dir in self.log_dirs:
                self._checkpoints[log_dir] = read_offset_checkpoint_or_warn(
                    log_dir / CLEANER_OFFSET_CHECKPOINT, "cleaning from the log start"
                )

    def checkpoint(self, tp: TopicPartition, log_dir: Path) -> int | None:
        with self._changed:
            return self._checkpoints.get(log_dir, {}).get(tp)

    def cleanable_logs(self) -> list[LogToClean]:
        """Every compacted log not in progress or paused, with its dirty range."""
        found = []
        for tp, partition_log, log_dir in list(self._logs()):
            if not partition_log.config.compacted:
                continue
            with self._changed:
                if tp in self._in_progress or tp in self._paused:
                    continue
            found.append(self._measure(tp, partition_log, log_dir))
        return found

    def _measure(self, tp: TopicPartition, partition_log: Log, log_dir: Path) -> LogToClean:
        first_dirty, first_uncleanable, needs_now = cleanable_offsets(
            partition_log, self.checkpoint(tp, log_dir), partition_log.clock_ms()
        )
        clean_bytes = cleanable_bytes = 0
        for segment in segments_to_clean(partition_log):
            if segment.next_offset <= first_dirty:
                clean_bytes += segment.size
            elif segment.base_offset < first_uncleanable:
                cleanable_bytes += segment.size
        return LogToClean(
            tp,
            partition_log,
            log_dir,
            first_dirty,
            first_uncleanable,
            clean_bytes,
            cleanable_bytes,
            needs_now,
        )

    def grab_filthiest_log(self) -> LogToClean | None:
        """The log to clean next, marked in progress; None when none qualifies."""
        candidates = [each for each in self.cleanable_logs() if each.is_cleanable]
        candidates.sort(key=lambda each: each.cleanable_ratio, reverse=True)
        with self._changed:
            for each in candidates:
                if each.tp not in self._in_progress and each.tp not in self._paused:
                    self._in_progress.add(each.tp)
                    return each
        return None

    def should_abort(self, tp: TopicPartition) -> bool:
        return tp in self._aborting

    def done_cleaning(self, target: LogToClean, end_offset: int | None) -> None:
        """The round over ``target`` ended; ``end_offset`` is checkpointed unless None."""
        with self._changed:
            try:
                if end_offset is not None and target.tp not in self._aborting:
                    self._write_checkpoint(target.log_dir, {target.tp: end_offset})
            finally:
                self._in_progress.discard(target.tp)
                self._aborting.discard(target.tp)
                self._changed.notify_all()

    def _write_checkpoint(self, log_dir: Path, updates: Mapping[TopicPartition, int]) -> None:
        live = {tp for tp, _log, where in self._logs() if where == log_dir}
        offsets = {
            tp: offset
            for tp, offset in self._checkpoints.get(log_dir, {}).items()
            if tp in live or tp in updates
        }
        offsets.update(updates)
        write_offset_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT, offsets)
        self._checkpoints[log_dir] = offsets

    def abort_and_pause(self, tp: TopicPartition) -> None:
        """Stop any round over ``tp`` (waiting for it to end) and keep the log out."""
        with self._changed:
            self._paused[tp] = self._paused.get(tp, 0) + 1
            if tp in self._in_progress:
                self._aborting.add(tp)
            while tp in self._in_progress:
                self._changed.wait()

    def resume(self, tp: TopicPartition) -> None:
        with self._changed:
            count = self._paused.get(tp, 0) - 1
            if count > 0:
                self._paused[tp] = count
            else:
                self._paused.pop(tp, None)

    def forget(self, tp: TopicPartition) -> None:
        """Drop ``tp``'s checkpoint entry (its log was deleted)."""
        with self._changed:
            for log_dir, offsets in self._checkpoints.items():
                if tp in offsets:
                    del offsets[tp]
                    write_offset_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT, offsets)


class LogCleaner:
    """``log.cleaner.threads`` threads, each cleaning the filthiest log in turn."""

    def __init__(self, config: CleanerConfig, log_dirs: Iterable[Path], logs: PartitionLogs):
        self.config = config
        self.manager = LogCleanerManager(log_dirs, logs)
        self._logs = logs
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.throttle = config.throttle()  # shared by every Cleaner it makes
        self.rounds = 0
        self.last_stats: CleanerStats | None = None

    def startup(self) -> None:
        self.manager.load_checkpoints()
        if not self.config.enable:
            return
        self._stop.clear()
        for number in range(self.config.threads):
            cleaner = self.new_cleaner()
            thread = threading.Thread(
                target=self._run, args=(cleaner,), name=f"log-cleaner-{number}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def shutdown(self) -> None:
        """Stop the threads; a round under way stops between batches."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._threads = []

    def new_cleaner(self) -> Cleaner:
        """A cleaner with one thread's share of the dedupe buffer, drawing on the
        broker's one throttle (the tier's cleaner takes one too)."""
        return Cleaner(
            self.config.dedupe_buffer_per_thread,
            io_buffer_bytes=self.config.io_buffer_size,
            throttle=self.throttle,
        )

    def abort_and_pause(self, tp: TopicPartition) -> None:
        self.manager.abort_and_pause(tp)

    def resume(self, tp: TopicPartition) -> None:
        self.manager.resume(tp)

    def forget(self, tp: TopicPartition) -> None:
        """``tp``'s log was deleted: drop its checkpoint entry and its pause."""
        self.manager.forget(tp)
        self.manager.resume(tp)

    def clean_filthiest_log(self, cleaner: Cleaner) -> bool:
        """One round over the filthiest log; False when no log needed cleaning."""
        target = self.manager.grab_filthiest_log()
        if target is None:
            return False
        end_offset: int | None = None
        try:
            result = cleaner.clean(
                target.log,
                target.first_dirty_offset,
                target.first_uncleanable_offset,
                should_abort=lambda: self._stop.is_set() or self.manager.should_abort(target.tp),
            )
            end_offset = result.end_offset
            self.last_stats = result.stats
            self.rounds += 1
        except LogCleaningAbortedError as aborted:
            logger.info("cleaning of %s stopped: %s", target.tp, aborted)
        finally:
            self.manager.done_cleaning(target, end_offset)
        return end_offset is not None

    def delete_retired_files(self) -> None:
        for _tp, partition_log, _dir in list(self._logs()):
            if partition_log.config.compacted:
                partition_log.delete_retired_files()

    def _run(self, cleaner: Cleaner) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self.clean_filthiest_log(cleaner)
                self.delete_retired_files()
            except Exception:
                logger.exception("log cleaner round failed; backing off")
                cleaned = False
            if not cleaned:
                self._stop.wait(self.config.backoff_ms / 1000)
