"""The remote log manager: keeps every ``remote.storage.enable`` partition's tier up to date.

Kafka's ``RemoteLogManager`` for one broker. For each such partition it owns the
tier's manifest (claimed with a writer epoch above any earlier owner's) and, on
every pass (``remote.log.manager.task.interval.ms``):

1. rolls the active segment once its oldest records have waited
   ``remote.log.segment.roll.ms`` since their append, or the topic's
   ``tierlog.remote.segment.max.upload.interval.ms`` less one pass (rolled then, they
   are uploaded before the bound runs out), so the tier is never further behind the log
   end than that bound (or one pass, if longer), idle partition or busy. Only a segment
   holding committed records the tier lacks is rolled: an idle partition already in the
   tier rolls nothing, and no segment is closed that could not be uploaded yet. Rolling
   happens in the pass, under the partition's lock, before the uploads: never beside an
   upload of the same partition;
2. uploads closed segments above the tier's end, oldest first, each flushed first
   (only data below the recovery point goes to the tier: a local crash cannot lose
   what the tier already serves);
3. applies total retention (``retention.ms``/``retention.bytes``, the log start
   offset) to the tier: the new log start in the manifest first (readers no longer
   see the segments below it), then their objects (and chunks wholly below it), then
   the manifest records how far deletion got; a pass that finds dead objects not yet
   deleted (a crash or an outage mid-way) deletes them first;
4. now and then sweeps leftovers of failed attempts (``uploader``) and of cleaning
   passes (orphaned objects);
5. for a compacted topic (``cleanup.policy`` holding ``compact``), cleans the tier
   when it is dirty enough (``tiered_cleaner``; needs ``cleaner``, which the sidecar
   sets once its chunk cache is open), last, so a failing pass holds nothing else up.

Once per sweep interval, after a pass, it also aborts the store's multipart uploads
older than the abandon timeout, for all partitions at once: S3 finds them by one
listing of the bucket (MinIO answers no prefix shorter than a whole key), which asked
per partition would be repeated for every partition. An upload that old is given up
by whoever started it, as the per-partition sweep treats its entry; the store's root
(the cluster's prefix) bounds what is touched.

The log's ``tiered_end_offset`` follows the manifest's finished segments, and local
retention frees a segment only below it. A pass that meets an unavailable store
stops for that partition and retries with exponential backoff; nothing local is
deleted meanwhile because nothing new was confirmed. A writer that finds itself
fenced (another owner claimed the partition) stops writing to that partition's tier.

A partition whose newest manifest head does not decode waits, logged at ERROR at every
try (with the usual backoff), keeping its local segments: only the writer that stored
that head knows what it records, and its next change or sweep (still possible: its base
is stored) supersedes it; a claim or any other writer refuses (``manifest_store``).

A partition whose manifest vanished (the bucket was emptied or recreated; also found
at a claim when the log says offsets lie in the tier but the store has no manifest)
stops too, logged at ERROR: its tiered end drops to the local log start, so local
retention deletes nothing more (the tier's copies are gone), and the passes only look,
now and then, whether a manifest is back: an operator's rebase
(``tierlog tier rebase``, a fresh manifest of what the bucket holds) or a restored
bucket. Then the partition is claimed again, with a writer epoch above its old one,
and re-uploads its local segments. ``problems`` lists stopped and failing partitions
(for the sidecar's metrics and readiness detail).

Turning tiering off for a topic follows Kafka's KIP-950. With
``remote.log.copy.disable`` the passes go on without steps 1, 2 and 5: the tier is read
only, still under total retention (and the log frees nothing locally: ``Log``). With
``remote.storage.enable`` back to false (allowed only with
``remote.log.delete.on.disable``: ``check_config_change``) the log starts at its first
local offset at once (``Log.update_config``), and the next pass stops managing the
partition and deletes its tier as a deleted topic's; the topic's config says the
deletion is owed, so after a crash the first pass of the next start finishes it.

Attaching a partition joins its log to the tier (``Log.continue_tier``): a replaced
pod with an empty volume starts the partition at the tier's end offset, with the
producers of the tier's last snapshot and the leader epochs it recorded
(``tier_state``), and serves the older offsets from the tier.

Under replication only the leader keeps the tier (``scope``): it claims the manifest
when it starts leading, with a writer epoch above the previous leader's (which is
fenced from then on), and ``release`` drops the partition when it stops. Only
segments below the high watermark (``committed_end``) are uploaded, so whichever
in-sync replica leads next holds everything the tier holds. A new leader whose active
segment ends where the tier ends but began below it (its predecessor rolled there for
the bound, and no record since told it so) rolls there as it claims, so that what it
appends next is uploaded alone: nothing in the tier is uploaded again.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tierlog.storage.cleaner import LogCleaningAbortedError
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import InvalidConfigError, KafkaStorageError, TierlogError
from tierlog.storage.log import Log, wall_clock_ms
from tierlog.storage.scheduler import PeriodicTask
from tierlog.storage.segment import LogSegment
from tierlog.storage.tier.layout import chunks_prefix, manifest_prefix, segments_prefix
from tierlog.storage.tier.manifest import (
    CorruptManifestError,
    FencedWriterError,
    ManifestVanishedError,
    PartitionManifest,
)
from tierlog.storage.tier.manifest_chunks import CHUNK_ENTRIES, dead_objects
from tierlog.storage.tier.manifest_store import ManifestWriter, load_manifest
from tierlog.storage.tier.observer import TierObserver
from tierlog.storage.tier.remote_retention import remote_segments_to_delete
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.tier_state import TierState, tier_state_at
from tierlog.storage.tier.tiered_cleaner import TierCleaner
from tierlog.storage.tier.uploader import sweep_abandoned_uploads, upload_segment
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "FAILING",
    "REMOTE_LOG_MANAGER_KEYS",
    "RemoteLogManager",
    "RemoteLogManagerConfig",
    "StopReason",
    "TierProblem",
    "UploadLag",
]

log = logging.getLogger(__name__)


LogSource = Callable[[], Iterable[tuple[TopicPartition, Log]]]


@dataclass(frozen=True)
class RemoteLogManagerConfig:
    """Broker settings of the remote log manager (Kafka's names where Kafka has one)."""

    task_interval_ms: int = 30_000  # remote.log.manager.task.interval.ms
    segment_roll_ms: int = 300_000  # remote.log.segment.roll.ms
    retry_backoff_ms: int = 500  # remote.log.manager.task.retry.backoff.ms
    retry_backoff_max_ms: int = 30_000  # remote.log.manager.task.retry.backoff.max.ms
    abandon_upload_ms: int = 30 * 60_000  # remote.log.manager.upload.abandon.ms
    sweep_interval_ms: int = 10 * 60_000  # remote.log.manager.sweep.interval.ms
    threads: int = 4  # remote.log.manager.thread.pool.size
    manifest_chunk_entries: int = CHUNK_ENTRIES  # entries per manifest chunk (no key)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> RemoteLogManagerConfig:
        """The settings among ``props`` (Kafka-named broker keys); others are ignored."""
        values: dict[str, int] = {}
        for key, name in REMOTE_LOG_MANAGER_KEYS.items():
            if key not in props:
                continue
            try:
                values[name] = int(props[key])
            except ValueError:
                raise InvalidConfigError(
                    f"{key} expects a whole number, got {props[key]!r}"
                ) from None
            if values[name] < (1 if name == "threads" else 0):
                raise InvalidConfigError(f"{key}={values[name]} is out of range")
        return cls(**values)


REMOTE_LOG_MANAGER_KEYS = {
    "remote.log.manager.task.interval.ms": "task_interval_ms",
    "remote.log.segment.roll.ms": "segment_roll_ms",
    "remote.log.manager.task.retry.backoff.ms": "retry_backoff_ms",
    "remote.log.manager.task.retry.backoff.max.ms": "retry_backoff_max_ms",
    "remote.log.manager.upload.abandon.ms": "abandon_upload_ms",
    "remote.log.manager.sweep.interval.ms": "sweep_interval_ms",
    "remote.log.manager.thread.pool.size": "threads",
}


@dataclass(frozen=True)
class UploadLag:
    """How far the tier is behind the log: closed local segments not yet in it (Kafka's
    RemoteCopyLag*), and the records above its end, to the log end."""

    segments: int
    size_bytes: int
    offsets: int
    age_ms: int  # how long the oldest of those records has waited (0: none waits)
    bound_ms: int  # the most ``age_ms`` should reach, upload time aside (-1: no bound)


class StopReason(enum.Enum):
    """Why a partition's uploads stopped until something changes."""

    FENCED = "fenced"  # another owner claimed the tier: for good, in this process
    MANIFEST_VANISHED = "manifest_vanished"  # until a rebase or a restored bucket


FAILING = "failing"


@dataclass(frozen=True)
class TierProblem:
    """A partition whose tier is not being kept up to date, and why."""

    tp: TopicPartition
    state: str  # a StopReason's value, or FAILING (passes fail and are retried)
    detail: str  # the error that stopped it, or the last pass's


@dataclass
class _Partition:
    tp: TopicPartition
    log: Log
    writer: ManifestWriter | None = None  # None until claimed
    failures: int = 0
    last_error: str = ""
    retry_at_ms: int = 0
    next_sweep_ms: int = 0
    stopped: StopReason | None = None
    min_epoch: int = 0  # a claim's writer epoch is at least this (above a vanished one)
    lock: threading.Lock = field(default_factory=threading.Lock)


class RemoteLogManager:
    def __init__(
        self,
        store: ObjectStore,
        config: RemoteLogManagerConfig | None = None,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        observer: TierObserver | None = None,
        writer_id: str | None = None,
    ):
        self.store = store
        self.config = config or RemoteLogManagerConfig()
        self.clock_ms = clock_ms
        self.observer = observer or TierObserver()
        self.writer_id = writer_id or uuid.uuid4().hex
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._manifest_listeners: list[Callable[[PartitionManifest], None]] = []
        self._logs: LogSource | None = None
        # Which partitions this broker may take over in the tier (claiming fences the
        # previous writer): the sidecar narrows it to those it owns or is draining, or
        # under replication to those it leads.
        self.scope: Callable[[TopicPartition], bool] = lambda _tp: True
        # Whether a log created here continues the partition's tier at once (claiming
        # it). A broker that owns a partition alone must: its new log (a replaced pod's
        # empty volume, a partition handed over while the plan changes) starts at the
        # tier's end, never at offset 0 beside the tier. Under replication only the
        # leader does: a follower's new log copies its leader's, whose tier it is.
        self.joins_new_logs: Callable[[TopicPartition], bool] = lambda _tp: True
        # How far a partition's log is committed: only segments below it are uploaded.
        # Under replication the high watermark, so the tier never holds offsets a new
        # leader may not have (its log would then disagree with the tier it continues).
        self.committed_end: Callable[[TopicPartition, Log], int] = lambda _tp, partition_log: (
            partition_log.log_end_offset
        )
        # Compacts the tier of compacted topics; None: their tiers are not cleaned.
        self.cleaner: TierCleaner | None = None
        # Partitions whose tier was deleted as their tiering was turned off (this process
        # need not look again until it is turned on and off once more).
        self._deleted_on_disable: set[TopicPartition] = set()
        self._deleting: set[TopicPartition] = set()  # those whose deletion runs now
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._next_upload_sweep_ms = 0
        self._task = PeriodicTask("remote-log-manager", self.config.task_interval_ms, self.run_once)
        self._pool = ThreadPoolExecutor(
            max(1, self.config.threads), thread_name_prefix="remote-log"
        )

    # -- partitions ---------------------------------------------------------------------

    def attach(self, tp: TopicPartition, partition_log: Log) -> None:
        """Take over ``tp``'s tier and join its log to it (raises when the store is
        unavailable: a log must not take appends before it knows where the tier ends)."""
        partition = _Partition(tp, partition_log)
        with partition.lock:
            self._claim(partition)
        with self._lock:
            self._partitions[tp] = partition
            self._deleted_on_disable.discard(tp)

    def adopt(self, tp: TopicPartition, partition_log: Log) -> None:
        """Manage ``tp`` from the next pass on (claiming then): for logs loaded from
        disk, which already hold their data and may serve while the store is away."""
        with self._lock:
            self._partitions.setdefault(tp, _Partition(tp, partition_log))
            self._deleted_on_disable.discard(tp)

    def detach(self, tp: TopicPartition) -> None:
        with self._lock:
            partition = self._partitions.pop(tp, None)
        if partition is not None:
            with partition.lock:  # wait for a pass in progress
                pass

    def release(self, tp: TopicPartition) -> None:
        """Stop managing ``tp`` at once, without waiting for a pass in progress: this
        broker no longer leads it. A pass under way may finish its step; once the next
        leader has claimed the tier, whatever it writes is fenced. Leading ``tp`` again
        claims it anew, with a higher writer epoch."""
        with self._lock:
            self._partitions.pop(tp, None)

    def delete_partition(self, tp: TopicPartition) -> None:
        """Stop managing ``tp`` and delete its tier (the topic is being deleted, or its
        tiering turned off).

        Manifest heads go first, newest first, then chunks, so a crash part-way leaves
        objects no manifest names (deleting again, or a later partition of that name,
        sweeps them) rather than a manifest naming objects that are gone. Raises when
        the store is unavailable; nothing is lost by trying again."""
        self.detach(tp)
        manifests = [info.key for info in self.store.list(manifest_prefix(tp))]
        self.store.delete(reversed(manifests))
        self.store.delete([info.key for info in self.store.list(chunks_prefix(tp))])
        segments = list(self.store.list(segments_prefix(tp)))
        self.store.delete(info.key for info in segments)
        if segments:
            log.info("%s: deleted %d objects from the tier", tp, len(segments))
            self.observer.segments_deleted(
                tp, len(segments), sum(info.size_bytes for info in segments)
            )

    def on_manifest_change(self, listener: Callable[[PartitionManifest], None]) -> None:
        """Call ``listener(manifest)`` with each version this process stores of a
        partition's manifest (its claim, an upload finished, retention deleted): a reader
        in the same process takes it as the partition's view (``RemoteLogReader.offer``),
        without the listing and GET of loading it."""
        self._manifest_listeners.append(listener)

    def _manifest_changed(self, manifest: PartitionManifest) -> None:
        for listener in self._manifest_listeners:
            listener(manifest)

    @property
    def partitions(self) -> list[TopicPartition]:
        return sorted(self._partitions)

    def manifest(self, tp: TopicPartition) -> PartitionManifest | None:
        """The manifest as this writer last wrote or read it (None until claimed)."""
        partition = self._partitions.get(tp)
        writer = partition.writer if partition else None
        return writer.manifest if writer else None

    def upload_lag(self, tp: TopicPartition) -> UploadLag:
        partition = self._partitions.get(tp)
        if partition is None or not partition.log.config.copies_to_tier:
            return UploadLag(0, 0, 0, 0, -1)  # nothing is to be uploaded
        partition_log = partition.log
        waiting = self._closed_untiered(tp, partition_log)
        tier_end = max(partition_log.tiered_end_offset, partition_log.log_start_offset)
        behind = max(0, partition_log.log_end_offset - tier_end)
        oldest_ms = next(
            (s.first_append_ms for s in partition_log.segments if s.next_offset > tier_end),
            None,
        )
        bound_ms = partition_log.config.remote_segment_max_upload_interval_ms
        return UploadLag(
            len(waiting),
            sum(segment.size for segment in waiting),
            behind,
            max(0, self.clock_ms() - oldest_ms) if behind and oldest_ms is not None else 0,
            max(bound_ms, self.config.task_interval_ms) if bound_ms >= 0 else -1,
        )

    # -- the periodic pass --------------------------------------------------------------

    def start(self, logs: LogSource | None = None) -> None:
        """Run passes in the background; each adopts the tiered logs ``logs`` lists
        (a topic switched to ``remote.storage.enable`` is picked up at the next pass)."""
        self._logs = logs
        self._task.start()

    def stop(self) -> None:
        self._stopping.set()  # a cleaning pass under way stops between batches
        self._task.stop()
        self._pool.shutdown(wait=True)

    def run_soon(self, tp: TopicPartition) -> None:
        """A pass for ``tp`` now, in the background, without waiting for the timer (a
        broker draining ``tp`` to its next owner is waited on); nothing if not managed."""
        partition = self._partitions.get(tp)
        if partition is None:
            return
        with contextlib.suppress(RuntimeError):  # stopping: the pool takes no more work
            self._pool.submit(self._run_partition, partition)

    def run_once(self) -> None:
        """One pass over every managed partition, several at a time, after deleting the
        tiers whose tiering was turned off."""
        turned_off = []
        for tp, partition_log in self._logs() if self._logs else ():
            if not self.scope(tp):
                continue
            config = partition_log.config
            if config.remote_storage_enable:
                self.adopt(tp, partition_log)
            elif config.remote_log_delete_on_disable and tp not in self._deleted_on_disable:
                turned_off.append((tp, partition_log))
        for _ in self._pool.map(self._delete_on_disable, turned_off):
            pass
        with self._lock:
            partitions = list(self._partitions.values())
        for _ in self._pool.map(self._run_partition, partitions):
            pass
        if partitions:
            self._abort_incomplete_uploads()

    def _delete_on_disable(self, turned_off: tuple[TopicPartition, Log]) -> None:
        """Delete the tier of a partition whose tiering was turned off (KIP-950's
        ``remote.log.delete.on.disable``). The topic's config is what records the
        deletion is owed: after a restart the first pass deletes again whatever a
        crash left (one listing when nothing is left); until it succeeds, each pass
        tries again. Its log already starts at its first local offset
        (``Log.update_config``), so no reader is sent to the objects going here.
        Tiering turned on again meanwhile waits for the deletion to end (``_claim``):
        a claim in between would name objects the deletion then removes."""
        tp, partition_log = turned_off
        with self._lock:
            if partition_log.config.remote_storage_enable:
                return  # turned on again already: its tier is claimed, not deleted
            self._deleting.add(tp)
        try:
            self.delete_partition(tp)
        except (TierlogError, OSError) as error:
            log.warning("%s: cannot delete the tier yet (%s); trying at the next pass", tp, error)
        else:
            self._deleted_on_disable.add(tp)
        finally:
            with self._lock:
                self._deleting.discard(tp)

    def _abort_incomplete_uploads(self) -> None:
        """The store-wide step of the sweep (see the module doc), when it is due."""
        now_ms = self.clock_ms()
        if now_ms < self._next_upload_sweep_ms:
            return
        try:
            aborted = self.store.abort_incomplete_uploads(
                "", older_than_s=self.config.abandon_upload_ms / 1000
            )
        except (TierlogError, OSError) as error:
            log.warning("cannot sweep incomplete uploads (%s); trying at the next pass", error)
            return
        self._next_upload_sweep_ms = now_ms + self.config.sweep_interval_ms
        if aborted:
            log.info("aborted %d abandoned multipart uploads", aborted)

    def problems(self) -> list[TierProblem]:
        """The partitions whose uploads are stopped or failing, in partition order."""
        with self._lock:
            partitions = sorted(self._partitions.values(), key=lambda p: p.tp)
        found = []
        for partition in partitions:
            state = partition.stopped.value if partition.stopped else FAILING
            if partition.stopped or partition.failures:
                found.append(TierProblem(partition.tp, state, partition.last_error))
        return found

    def _run_partition(self, partition: _Partition) -> None:
        now_ms = self.clock_ms()
        if partition.stopped is StopReason.FENCED or now_ms < partition.retry_at_ms:
            return
        if not partition.log.config.remote_storage_enable:
            return
        if not partition.lock.acquire(blocking=False):
            return  # the previous pass is still at it
        try:
            if partition.stopped is StopReason.MANIFEST_VANISHED and not self._manifest_is_back(
                partition, now_ms
            ):
                return
            self._pass(partition, now_ms)
            partition.failures = 0
        except LogCleaningAbortedError as error:
            log.info("%s: tier cleaning stopped: %s", partition.tp, error)
        except FencedWriterError as error:
            partition.stopped, partition.last_error = StopReason.FENCED, str(error)
            log.error(
                "%s: no longer the tier's writer, stopping its uploads: %s", partition.tp, error
            )
        except ManifestVanishedError as error:
            self._stop_vanished(partition, error, now_ms)
        except CorruptManifestError as error:
            backoff = self._back_off(partition, error, now_ms)
            log.error(
                "%s: uploads wait: the newest tier manifest head does not decode (%s), and "
                "what only it records (an upload, a deletion, a newer writer epoch) must not "
                "be written over from an older head. Local segments are kept. Restore the "
                "head; retrying in %d ms",
                partition.tp,
                error,
                backoff,
            )
        except (TierlogError, OSError) as error:
            backoff = self._back_off(partition, error, now_ms)
            log.warning(
                "%s: tier pass failed (%s), retrying in %d ms", partition.tp, error, backoff
            )
        finally:
            partition.lock.release()

    def _back_off(self, partition: _Partition, error: Exception, now_ms: int) -> int:
        """Count a failed pass and put the next off, doubling; returns the wait in ms."""
        partition.failures += 1
        partition.last_error = f"{type(error).__name__}: {error}"
        backoff: int = min(
            self.config.retry_backoff_max_ms,
            self.config.retry_backoff_ms * 2 ** (partition.failures - 1),
        )
        partition.retry_at_ms = now_ms + backoff
        return backoff

    def _stop_vanished(
        self, partition: _Partition, error: ManifestVanishedError, now_ms: int
    ) -> None:
        """Stop uploading ``partition``: its manifest is gone (see the module doc)."""
        if partition.writer is not None:
            partition.min_epoch = partition.writer.writer_epoch + 1
        partition.writer = None
        partition.stopped, partition.last_error = StopReason.MANIFEST_VANISHED, str(error)
        partition.failures = 0
        partition.retry_at_ms = now_ms + self.config.retry_backoff_max_ms
        # The tier no longer holds the local segments it was given: keep them all.
        partition.log.tiered_end_offset = partition.log.local_log_start_offset
        log.error(
            "%s: stopping uploads to the tier: %s. Local segments are kept. To go on with "
            "what the bucket holds, run `tierlog tier rebase %s` (offsets only the lost "
            "objects held are then gone) or restore the bucket; uploads resume by themselves",
            partition.tp,
            error,
            partition.tp.dir_name,
        )

    def _manifest_is_back(self, partition: _Partition, now_ms: int) -> bool:
        """Whether a stopped partition's store holds a manifest again (a rebase or a
        restore); if not, look again after the longest backoff."""
        try:
            back = load_manifest(self.store, partition.tp).version > 0
        except (TierlogError, OSError) as error:
            log.warning("%s: cannot look for a rebased manifest: %s", partition.tp, error)
            back = False
        if not back:
            partition.retry_at_ms = now_ms + self.config.retry_backoff_max_ms
            return False
        log.warning("%s: a manifest is back in the tier: claiming it again", partition.tp)
        partition.stopped, partition.last_error = None, ""
        return True

    def _pass(self, partition: _Partition, now_ms: int) -> None:
        writer = self._claim(partition)
        config = partition.log.config
        if config.copies_to_tier:  # else the tier is read only (remote.log.copy.disable)
            self._roll_if_due(partition.tp, partition.log, now_ms)
            self._upload_closed_segments(partition, writer)
        self._apply_retention(partition, writer, now_ms)
        if now_ms >= partition.next_sweep_ms:
            swept = sweep_abandoned_uploads(
                writer, now_ms=now_ms, abandon_after_ms=self.config.abandon_upload_ms
            )
            if swept.abandoned_entries:
                self.observer.segments_deleted(
                    partition.tp, swept.abandoned_entries, swept.size_bytes
                )
            partition.next_sweep_ms = now_ms + self.config.sweep_interval_ms
        if self.cleaner is not None and config.compacted and config.copies_to_tier:
            # Last: a failing pass stops nothing. A read-only tier is not rewritten.
            self.cleaner.clean_if_dirty(writer, config, now_ms, should_abort=self._stopping.is_set)

    def _claim(self, partition: _Partition) -> ManifestWriter:
        if partition.writer is not None:
            return partition.writer
        with self._lock:
            if partition.tp in self._deleting:
                raise KafkaStorageError(
                    f"{partition.tp}: its tier is being deleted (tiering was turned off); "
                    "it is claimed again once that is done"
                )
        self._check_tier_not_lost(partition)
        writer = ManifestWriter.claim(
            self.store,
            partition.tp,
            self.writer_id,
            min_epoch=partition.min_epoch,
            chunk_entries=self.config.manifest_chunk_entries,
            on_change=self._manifest_changed,
        )
        manifest, view = writer.manifest, writer.view()
        restart = TierState(manifest.end_offset, (), ())
        if partition.log.log_end_offset < manifest.end_offset:  # it starts over there
            restart = tier_state_at(self.store, view, manifest.end_offset)
        partition.log.continue_tier(
            manifest.log_start_offset,
            manifest.end_offset,
            restart.producers,
            restart.leader_epochs,
        )
        partition.log.roll_at_tier_end()
        partition.writer = writer
        log.info(
            "%s: tier writer epoch %d; tier holds [%d, %d)",
            partition.tp,
            writer.writer_epoch,
            view.log_start_offset,
            manifest.end_offset,
        )
        return writer

    def _check_tier_not_lost(self, partition: _Partition) -> None:
        """A log whose start lies below its first local segment had those offsets in
        the tier: a store with no manifest for it lost them (a restart after the bucket
        was recreated). Claiming would start an empty manifest and hide the loss."""
        partition_log = partition.log
        if partition_log.log_start_offset >= partition_log.local_log_start_offset:
            return
        if load_manifest(self.store, partition.tp).version == 0:
            raise ManifestVanishedError(
                f"{partition.tp}: the log holds offsets [{partition_log.log_start_offset}, "
                f"{partition_log.local_log_start_offset}) only in the tier, but "
                f"{self.store.url} has no manifest for it: the bucket was emptied or replaced"
            )

    # -- upload -------------------------------------------------------------------------

    def _roll_if_due(self, tp: TopicPartition, partition_log: Log, now_ms: int) -> None:
        """Roll the active segment when its oldest records have waited long enough and it
        holds committed records the tier lacks (see the module doc)."""
        active = partition_log.active_segment
        if active.size == 0 or partition_log.log_end_offset <= partition_log.tiered_end_offset:
            return
        if self.committed_end(tp, partition_log) <= active.base_offset:
            return  # nothing in it may be uploaded yet: let it grow
        if now_ms - active.first_append_ms >= self._roll_after_ms(partition_log.config):
            partition_log.roll()

    def _roll_after_ms(self, topic: LogConfig) -> int:
        """How long records may wait in the active segment: the broker's roll interval,
        or less under the topic's bound (one pass less, so that the pass rolling them
        comes before the bound runs out)."""
        bound_ms = topic.remote_segment_max_upload_interval_ms
        if bound_ms < 0:
            return self.config.segment_roll_ms
        return min(self.config.segment_roll_ms, max(0, bound_ms - self.config.task_interval_ms))

    def _closed_untiered(self, tp: TopicPartition, partition_log: Log) -> list[LogSegment]:
        """Closed, committed segments above the tier's end that still hold offsets of
        the log."""
        segments = partition_log.segments[:-1]
        committed_end = self.committed_end(tp, partition_log)
        return [
            segment
            for segment in segments
            if segment.next_offset > partition_log.tiered_end_offset
            and segment.next_offset > partition_log.log_start_offset
            and segment.next_offset <= committed_end
            and not segment.deleted
        ]

    def _upload_closed_segments(self, partition: _Partition, writer: ManifestWriter) -> None:
        partition_log = partition.log
        for segment in self._closed_untiered(partition.tp, partition_log):
            partition_log.flush(segment.next_offset)
            try:
                upload_segment(writer, segment, clock_ms=self.clock_ms, observer=self.observer)
            except (OSError, TierlogError):
                if segment.deleted:  # retention got there first (below the log start)
                    continue
                raise
            self._advance_tiered_end(partition_log, writer.manifest)

    @staticmethod
    def _advance_tiered_end(partition_log: Log, manifest: PartitionManifest) -> None:
        partition_log.tiered_end_offset = max(
            partition_log.tiered_end_offset, manifest.uploaded_end_offset
        )

    # -- retention ----------------------------------------------------------------------

    def _apply_retention(self, partition: _Partition, writer: ManifestWriter, now_ms: int) -> None:
        partition_log = partition.log
        self._finish_deletions(partition, writer)
        manifest = writer.manifest
        if partition_log.log_start_offset > manifest.log_start_offset:  # DeleteRecords
            start = partition_log.log_start_offset
            manifest = writer.update(lambda m: m.advance_log_start(start))
        deletion = remote_segments_to_delete(
            writer.view(),
            partition_log.segments,
            partition_log.config,
            log_start_offset=manifest.log_start_offset,
            now_ms=now_ms,
        )
        if deletion is not None:
            log.info(
                "%s: deleting %d remote segments (%s), log start -> %d",
                partition.tp,
                deletion.segments,
                deletion.reason,
                deletion.log_start_offset,
            )
            writer.update(lambda m: m.advance_log_start(deletion.log_start_offset))
            if deletion.log_start_offset > partition_log.log_start_offset:
                partition_log.increment_log_start_offset(
                    min(deletion.log_start_offset, partition_log.log_end_offset)
                )
        self._finish_deletions(partition, writer)

    def _finish_deletions(self, partition: _Partition, writer: ManifestWriter) -> None:
        """Delete the objects below the manifest's log start not yet deleted."""
        manifest = writer.manifest
        if manifest.deleted_end_offset >= manifest.log_start_offset:
            return
        dead = dead_objects(manifest, writer.chunks)
        self.store.delete(dead.keys)
        writer.update(lambda m: m.forget_deleted(manifest.log_start_offset))
        if dead.segments:
            self.observer.segments_deleted(
                partition.tp,
                len(dead.segments),
                sum(segment.log_size_bytes for segment in dead.segments),
            )
