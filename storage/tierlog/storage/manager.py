"""The log manager: every partition of a broker over one or more log directories.

It owns what spans partitions: ``meta.properties`` in each log dir, the checkpoint
files (recovery point, log start offset), the clean-shutdown marker, parallel
recovery at start-up, the group-commit flusher, and the placement of new partitions
(the log dir holding the fewest). The marker is removed as soon as the logs are
loaded, so a crash from then on is recognised as unclean at the next start.

A partition lives in exactly one log dir. The same partition directory in two of them
(a disk copied by hand, a dir listed under two names) stops start-up with both paths
named, as Kafka refuses to start: either copy may be the stale one, and serving one
silently could hide the other's newer data. A directory renamed for deletion
(``names.delete_dir_name``) that a crash left behind is removed at start-up.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.storage.checkpoints import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    atomic_write,
    base64_uuid,
    fsync_directory,
    read_meta_properties,
    read_offset_checkpoint_or_warn,
    sync_filesystem,
    write_meta_properties,
    write_offset_checkpoint,
    write_partition_metadata,
)
from tierlog.storage.cleaner_manager import CleanerConfig, LogCleaner
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import (
    InconsistentClusterIdError,
    KafkaStorageError,
    TierlogError,
    UnknownTopicOrPartitionError,
)
from tierlog.storage.flush import GroupCommitter
from tierlog.storage.log import AppendInfo, Log
from tierlog.storage.names import (
    delete_dir_name,
    is_delete_dir,
    parse_partition_dir,
    validate_topic_name,
)
from tierlog.storage.records.inflight import DecompressedBytesBudget
from tierlog.storage.records.validation import NO_BUDGET
from tierlog.storage.recovery import RecoveryProgress, load_segments
from tierlog.storage.scheduler import PeriodicTask
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.remote_log_manager import RemoteLogManager
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["LogManager", "LogManagerConfig"]

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"


@dataclass(frozen=True)
class LogManagerConfig:
    """Broker-level storage settings (Kafka's ``log.dirs``, ``node.id``...)."""

    log_dirs: tuple[Path, ...]
    node_id: int = 0
    cluster_id: str = "tierlog"
    default_log_config: LogConfig = field(default_factory=LogConfig)
    flush_check_interval_ms: int = 1000
    retention_check_interval_ms: int = 300_000
    # Kafka's num.recovery.threads.per.data.dir (2 since Kafka 4.0): partitions loaded,
    # and closed at shutdown, at once per log dir.
    recovery_threads_per_data_dir: int = 2
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)  # log.cleaner.*


class LogManager:
    """Opens, creates, flushes, checkpoints and closes the logs of one broker."""

    def __init__(
        self,
        config: LogManagerConfig,
        *,
        topic_config: Callable[[str], LogConfig] | None = None,
        on_flush: Callable[[Log, float], None] | None = None,
        tier: RemoteLogManager | None = None,
        decompression_budget: DecompressedBytesBudget = NO_BUDGET,
    ):
        if not config.log_dirs:
            raise KafkaStorageError("no log dirs configured")
        self.config = config
        self.tier = tier  # uploads and restores remote.storage.enable partitions
        # What every log's produce validation may hold decoded at once.
        self.decompression_budget = decompression_budget
        self._topic_config = topic_config or (lambda _topic: config.default_log_config)
        self._logs: dict[TopicPartition, Log] = {}
        self._log_dirs: dict[TopicPartition, Path] = {}
        self._lock = threading.Lock()
        # Partitions whose creation is under way, outside the lock (``get_or_create_log``).
        self._creating: dict[TopicPartition, _Creation] = {}
        self._shut_down = False
        self.committer = GroupCommitter(
            lambda: list(self._logs.values()),
            check_interval_ms=config.flush_check_interval_ms,
            on_flush=on_flush,  # (log, seconds) after each fsync round's flush of a log
        )
        self.retention = PeriodicTask(
            "log-retention", config.retention_check_interval_ms, self.run_retention_pass
        )
        self.cleaner = LogCleaner(config.cleaner, config.log_dirs, self._partition_logs)
        self.had_clean_shutdown: dict[Path, bool] = {}
        # Log dirs whose meta.properties this start wrote: a new or wiped volume, whose
        # replicas hold nothing they held before (Kafka sees a new directory.id, KIP-858).
        self.formatted_log_dirs: list[Path] = []
        self._dir_locks: list[int] = []
        self.retention_passes = 0  # for metrics: passes run and segments they retired
        self.retention_retired_segments = 0

    # -- life cycle -------------------------------------------------------------------

    def startup(self, progress: RecoveryProgress | None = None) -> None:
        """Load (recovering where needed) every partition in every log dir."""
        self._shut_down = False
        for log_dir in self.config.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._lock_dir(log_dir)
        try:
            _refuse_duplicate_partitions(self.config.log_dirs)
        except KafkaStorageError:
            self._release_dir_locks()
            raise
        self.formatted_log_dirs = []
        for log_dir in self.config.log_dirs:
            if self._ensure_meta_properties(log_dir):
                self.formatted_log_dirs.append(log_dir)
            self._load_dir(log_dir, progress)
            (log_dir / CLEAN_SHUTDOWN_MARKER).unlink(missing_ok=True)
        self.committer.start()
        self.retention.start()
        self.cleaner.startup()
        if self.tier is not None:
            self.tier.start(lambda: list(self._logs.items()))

    def shutdown(self) -> None:
        """Flush and close everything, write checkpoints, then the clean-shutdown marker."""
        if self.tier is not None:
            self.tier.stop()
        self.cleaner.shutdown()
        self.retention.stop()
        self.committer.stop()
        with self._lock:
            self._shut_down = True  # a creation under way closes its log, not registers it
            self._close_logs()
            self.write_checkpoints()
            for log_dir in self.config.log_dirs:
                atomic_write(log_dir / CLEAN_SHUTDOWN_MARKER, json.dumps({"version": 0}))
            self._logs.clear()
        self._release_dir_locks()

    def _close_logs(self) -> None:
        """Close every log, then sync each log dir's filesystem once.

        The logs close on the recovery threads of every log dir, as Kafka's shutdown
        does, writing what they hold (index trims, producer snapshots) without syncing
        it; one ``syncfs`` then makes all of it durable, with what the page cache held
        unflushed, before the checkpoints say so. An fsync per file made a broker of
        2,000 just-written partitions take 40 s to stop."""
        started = time.monotonic()
        threads = self._recovery_threads * len(self.config.log_dirs)
        with ThreadPoolExecutor(threads, thread_name_prefix="log-close") as pool:
            for _closed in pool.map(lambda each: each.close(sync=False), self._logs.values()):
                pass
        closed = time.monotonic()
        for log_dir in self.config.log_dirs:
            sync_filesystem(log_dir)
        log.info(
            "closed %d logs in %.2fs on %d threads, synced their filesystems in %.2fs",
            len(self._logs),
            closed - started,
            threads,
            time.monotonic() - closed,
        )

    @property
    def _recovery_threads(self) -> int:
        return max(1, self.config.recovery_threads_per_data_dir)

    def _lock_dir(self, log_dir: Path) -> None:
        """Hold ``<log dir>/.lock`` as Kafka does: two brokers on one log dir would
        corrupt each other's segments, so the second one refuses to start."""
        fd = os.open(log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise KafkaStorageError(
                f"{log_dir} is in use by another process (its {LOCK_FILE} is held)"
            ) from None
        self._dir_locks.append(fd)

    def _release_dir_locks(self) -> None:
        for fd in self._dir_locks:
            os.close(fd)  # releases the lock
        self._dir_locks.clear()

    def _ensure_meta_properties(self, log_dir: Path) -> bool:
        """Write the log dir's ``meta.properties``, or check that the one there names this
        cluster; whether it was written now (the log dir is formatted). As Kafka does, a
        log dir of another cluster, or one whose file cannot be read, stops the startup: a
        volume is never joined to a cluster it cannot be shown to belong to, and the file
        is left as it is for an operator to look at."""
        path = log_dir / META_PROPERTIES
        if not path.exists():
            write_meta_properties(
                path,
                {
                    "version": "1",
                    "node.id": str(self.config.node_id),
                    "cluster.id": self.config.cluster_id,
                    "directory.id": base64_uuid(uuid.uuid4()),
                },
            )
            return True
        stored = read_meta_properties(path)["cluster.id"]
        if stored != self.config.cluster_id:
            raise InconsistentClusterIdError(
                f"{path} says the log dir belongs to cluster {stored}, but this broker's "
                f"cluster.id is {self.config.cluster_id}: refusing to join it to this cluster"
            )
        return False

    def _load_dir(self, log_dir: Path, progress: RecoveryProgress | None) -> None:
        clean = (log_dir / CLEAN_SHUTDOWN_MARKER).exists()
        self.had_clean_shutdown[log_dir] = clean
        recovery_points = read_offset_checkpoint_or_warn(
            log_dir / RECOVERY_POINT_CHECKPOINT, "recovery points 0: after a crash all is scanned"
        )
        start_offsets = read_offset_checkpoint_or_warn(
            log_dir / LOG_START_OFFSET_CHECKPOINT, "each log starts at its first segment"
        )
        high_watermarks = read_offset_checkpoint_or_warn(
            log_dir / REPLICATION_OFFSET_CHECKPOINT, "high watermarks 0 until replicas report"
        )
        _remove_deleted_dirs(log_dir)
        partitions = _partition_dirs(log_dir)
        log.info(
            "loading %d partitions from %s (clean=%s) on %d recovery threads",
            len(partitions),
            log_dir,
            clean,
            self._recovery_threads,
        )

        def load(item: tuple[TopicPartition, Path]) -> tuple[TopicPartition, Log]:
            tp, path = item
            config = self._topic_config(tp.topic)
            loaded = load_segments(
                path,
                config,
                log_start_offset=start_offsets.get(tp, 0),
                recovery_point=recovery_points.get(tp, 0),
                clean_shutdown=clean,
                progress=progress,
                sync=False,  # one sync of the log dir's filesystem below, for all of them
            )
            return tp, Log(
                path,
                config,
                loaded.segments,
                log_start_offset=start_offsets.get(tp, 0),
                recovery_point=loaded.recovery_point,
                high_watermark=high_watermarks.get(tp, 0),
                recovered=loaded.rebuilt,
            )

        with ThreadPoolExecutor(self._recovery_threads, thread_name_prefix="log-recovery") as pool:
            for tp, loaded_log in pool.map(load, partitions):
                self._register(tp, loaded_log, log_dir)
        if not clean:
            sync_filesystem(log_dir)

    def _register(self, tp: TopicPartition, partition_log: Log, log_dir: Path) -> None:
        partition_log.flush_hook = self.committer.flush_and_wait
        partition_log.decompression_budget = self.decompression_budget
        self._logs[tp] = partition_log
        self._log_dirs[tp] = log_dir

    # -- partitions -------------------------------------------------------------------

    def get_log(self, tp: TopicPartition) -> Log:
        try:
            return self._logs[tp]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"no log for {tp}") from None

    def get_or_create_log(self, tp: TopicPartition, config: LogConfig | None = None) -> Log:
        """The partition's log, created in the least loaded log dir if it does not exist.

        A creation's work (the topic's config, the directory, its files and their fsyncs)
        runs outside the manager's lock, which only reserves the partition: a broker
        starting with thousands of replicas creates them a few at once
        (``ReplicaManager.apply_all``), their fsyncs sharing the file system's journal
        commits, where holding the lock made them wait in turn (~10 a second). A second
        caller for a partition under way waits for that creation's log."""
        validate_topic_name(tp.topic)
        if tp.partition < 0:
            raise UnknownTopicOrPartitionError(f"partition {tp.partition} is negative")
        while True:
            with self._lock:
                existing = self._logs.get(tp)
                if existing is not None:
                    return existing
                under_way = self._creating.get(tp)
                if under_way is None:
                    creation = self._creating[tp] = _Creation(self._least_loaded_dir())
                    break
            under_way.done.wait()  # then its log is registered, or it failed: look again
        try:
            created = self._create_log(tp, creation.log_dir, config)
            with self._lock:
                if self._shut_down:
                    created.close()
                    raise KafkaStorageError(f"cannot create {tp}: the log manager shut down")
                self._register(tp, created, creation.log_dir)
            return created
        finally:
            with self._lock:
                del self._creating[tp]
            creation.done.set()

    def _create_log(self, tp: TopicPartition, log_dir: Path, config: LogConfig | None) -> Log:
        created = self._create_partition_dir(
            log_dir / tp.dir_name, tp, config or self._topic_config(tp.topic)
        )
        # A follower's new log does not join the tier here: claiming it would fence
        # the leader, whose tier it is (``RemoteLogManager.joins_new_logs``).
        tier = self.tier
        if tier is not None and created.config.remote_storage_enable and tier.joins_new_logs(tp):
            self._join_tier(tp, created)
        return created

    def _create_partition_dir(self, directory: Path, tp: TopicPartition, config: LogConfig) -> Log:
        """A new partition's directory with its files and log, durable (its entry in the
        log dir too) before it is handed out; on a failure (a full disk) nothing of it is
        left, so no half-made partition is loaded at the next start."""
        try:
            directory.mkdir()
        except OSError as error:
            raise KafkaStorageError(f"cannot create {directory}: {error}") from error
        try:
            write_partition_metadata(directory / PARTITION_METADATA, self.topic_id(tp.topic))
            created = Log.open(directory, config)
            created.become_leader(0)
            fsync_directory(directory.parent)
            return created
        except OSError as error:
            shutil.rmtree(directory, ignore_errors=True)
            raise KafkaStorageError(f"cannot create {directory}: {error}") from error
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise

    def _join_tier(self, tp: TopicPartition, created: Log) -> None:
        """A new local log of a tiered topic continues the tier (a replaced pod's empty
        volume starts at the tier's end). Without the store it cannot know where to
        start, so the partition is not created and the caller may retry."""
        assert self.tier is not None
        try:
            self.tier.attach(tp, created)
        except BaseException:
            created.close()
            shutil.rmtree(created.directory, ignore_errors=True)
            raise

    def delete_log(self, tp: TopicPartition) -> None:
        """Close the partition's log and remove its directory (renamed first, as Kafka does),
        and its remote tier (objects and manifests) if it has one."""
        existing = self.get_log(tp)  # unknown partitions fail here, before the cleaner pauses
        tier = self.tier
        config = existing.config  # a tier turned off may still await its deletion
        if tier is not None and (
            config.remote_storage_enable
            or config.remote_log_delete_on_disable
            or tp in tier.partitions
        ):
            tier.delete_partition(tp)  # first: a store that is down fails the delete
        self.cleaner.abort_and_pause(tp)
        with self._lock:
            doomed = self.get_log(tp)
            del self._logs[tp]
            del self._log_dirs[tp]
        doomed.close_deleted()  # readers still holding it get UNKNOWN_TOPIC_OR_PARTITION
        renamed = doomed.directory.with_name(delete_dir_name(tp))
        doomed.directory.replace(renamed)
        shutil.rmtree(renamed)
        self.cleaner.forget(tp)

    def _partition_logs(self) -> list[tuple[TopicPartition, Log, Path]]:
        dirs = self._log_dirs
        return [(tp, lg, dirs[tp]) for tp, lg in list(self._logs.items()) if tp in dirs]

    def _least_loaded_dir(self) -> Path:
        counts = dict.fromkeys(self.config.log_dirs, 0)
        for log_dir in self._log_dirs.values():
            counts[log_dir] += 1
        for creation in self._creating.values():
            counts[creation.log_dir] += 1
        return min(self.config.log_dirs, key=lambda log_dir: counts[log_dir])

    def topic_id(self, topic: str) -> uuid.UUID:
        """The topic's id (in ``partition.metadata``; the group coordinator names
        partitions by it): derived from the cluster id and the name, so every broker agrees."""
        return uuid.uuid5(uuid.NAMESPACE_URL, f"tierlog:{self.config.cluster_id}/{topic}")

    @property
    def partitions(self) -> Sequence[TopicPartition]:
        return sorted(self._logs)

    def has_log(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` has a log here (``tp in partitions`` sorts every log first)."""
        return tp in self._logs

    @property
    def partition_count(self) -> int:
        """``len(partitions)`` without sorting them (a scrape asks it three times)."""
        return len(self._logs)

    def log_dir_of(self, tp: TopicPartition) -> Path:
        return self._log_dirs[tp]

    # -- operations -------------------------------------------------------------------

    def append(self, tp: TopicPartition, records: bytes | bytearray | memoryview) -> AppendInfo:
        return self.get_log(tp).append(records)

    def run_retention_pass(self, now_ms: int | None = None) -> int:
        """One retention pass over every log (Kafka's ``log.retention.check.interval.ms``
        job): retire what the rules allow, delete retired files whose delay has passed,
        and write the log-start-offset checkpoints when a log start moved."""
        retired = 0
        starts_before = {tp: lg.log_start_offset for tp, lg in self._logs.items()}
        for tp, partition_log in list(self._logs.items()):
            try:
                retired += partition_log.delete_old_segments(
                    now_ms=now_ms, is_tiered=_tiered_in(partition_log)
                )
                partition_log.delete_retired_files(now_ms)
            except TierlogError as error:
                log.error("retention of %s failed: %s", tp, error)
        if any(lg.log_start_offset != starts_before.get(tp) for tp, lg in self._logs.items()):
            self.write_checkpoints()
        self.retention_passes += 1
        self.retention_retired_segments += retired
        return retired

    def flush_all(self) -> None:
        for each in list(self._logs.values()):
            each.flush()

    def write_checkpoints(self) -> None:
        """Write each log dir's recovery-point, log-start-offset and high-watermark
        (``replication-offset-checkpoint``) checkpoints."""
        for log_dir in self.config.log_dirs:
            mine = {tp: lg for tp, lg in self._logs.items() if self._log_dirs[tp] == log_dir}
            write_offset_checkpoint(
                log_dir / RECOVERY_POINT_CHECKPOINT,
                {tp: lg.recovery_point for tp, lg in mine.items()},
            )
            write_offset_checkpoint(
                log_dir / LOG_START_OFFSET_CHECKPOINT,
                {tp: lg.log_start_offset for tp, lg in mine.items()},
            )
            write_offset_checkpoint(
                log_dir / REPLICATION_OFFSET_CHECKPOINT,
                {tp: lg.high_watermark for tp, lg in mine.items()},
            )


@dataclass(frozen=True)
class _Creation:
    """A partition's creation under way: where, and set once it ended (either way)."""

    log_dir: Path
    done: threading.Event = field(default_factory=threading.Event)


def _partition_dirs(log_dir: Path) -> list[tuple[TopicPartition, Path]]:
    return [
        (tp, path)
        for path in sorted(log_dir.iterdir())
        if path.is_dir() and (tp := parse_partition_dir(path.name)) is not None
    ]


def _refuse_duplicate_partitions(log_dirs: Sequence[Path]) -> None:
    """Raise, naming both paths, when a partition directory is in two log dirs."""
    seen: dict[TopicPartition, Path] = {}
    for log_dir in log_dirs:
        for tp, path in _partition_dirs(log_dir):
            if tp in seen:
                raise KafkaStorageError(
                    f"duplicate log directories for {tp.dir_name} are found in both "
                    f"{seen[tp]} and {path}: a partition lives in one log dir; "
                    "move the stale copy out of the log dirs and start again"
                )
            seen[tp] = path


def _remove_deleted_dirs(log_dir: Path) -> None:
    """Finish deletions a crash interrupted: the directories were renamed, not yet removed."""
    for path in log_dir.iterdir():
        if path.is_dir() and is_delete_dir(path.name):
            log.info("removing %s, a partition deleted before the last stop", path)
            shutil.rmtree(path)


def _tiered_in(partition_log: Log) -> Callable[[LogSegment], bool]:
    """Whether a segment of ``partition_log`` is safely in the tier: every offset in it
    lies below the tier's end as the remote log manager last confirmed it."""
    return lambda segment: segment.next_offset <= partition_log.tiered_end_offset
