"""Starting an empty broker from the tier a lost broker (or cluster) filled.

The bucket keeps each tiered topic's partition count and config overrides
(``topic_records``) beside the partitions' manifests. A restore makes those topics
again, and each new log of a tiered topic continues the tier
(``RemoteLogManager.attach``): its log start is the tier's start, its next offset the
tier's end, its leader epochs and producer states those the manifest recorded at that
end. So producers go on at the offsets the tier ends at, and consumers read everything
the tier held.

Without replication the topics go in the broker's topic store before the logs load
(``restore_locally``); the start then makes their logs as for any topic whose logs are
missing. With replication they go in the partition-state store, as a topic created
there (``restore_replicated``): every broker of the new cluster restores, the first
creates each topic and the others find it made, each partition on the brokers the lost
cluster had it on, its preferred leader first (the record's assignment), when the new
cluster has brokers of those ids; otherwise (a record that keeps none, or names a
broker the new cluster lacks, logged) placed as a new topic is, with as many replicas a
partition as the lost cluster gave it (the record's replication factor;
``default.replication.factor`` for a record that keeps none, logged;
INVALID_REPLICATION_FACTOR naming the topic when the new cluster has fewer brokers).
Each partition's first leader epoch is one past the last the tier recorded: the log a
leader continues from the tier carries those epochs, and a leader in a lower one would
erase them from its epoch cache, so a follower asking where its last epoch ended would
be told to truncate.
The leader claims the tier as it starts leading on an empty log (``_claim_tier``);
followers, fetching from offset 0, are told OFFSET_MOVED_TO_TIERED_STORAGE and start
at the leader's local log start with the tier's state, as a follower with a wiped
disk does. Only the leader uploads. Every restoring broker also reserves producer ids
past the highest its tier's producer snapshots hold (``reserve_past``): its own id file
went with its volume, and a new producer given a restored producer's id would have its
batches taken for that producer's duplicates, acknowledged and not written.

Only on log dirs with nothing in them (``lost+found`` aside, as a fresh volume has one,
and the output a ``tierlog cluster up`` broker writes there): a dir that holds logs or a
topic store belongs to a broker that is not lost, and mixing the two would hide which is
the truth (``DataDirNotEmptyError``). The restore leaves a marker, ``tierlog-restored``,
in the first log dir: written ``started`` before the first topic (``begin_restore``),
``done`` after the last (``restore_topics``). A start with the flag that finds ``done``
is a restart of the restored broker and starts as any other (so the flag may stay on
every start of a pod); one that finds ``started`` finishes the restore a crash
interrupted (creating the topics still missing).

Before it marks itself done the restore also keeps the groups' committed offsets the
tier holds (``group_offsets``) of the restored topics, each clamped to its restored
partition (``restored_groups``), for the group coordinator to commit again as their
``__consumer_offsets`` partitions load (``coordinator.restored_groups``)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tierlog.api.errors import (
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
)
from tierlog.broker.producer_ids import reserve_past
from tierlog.broker.topics import TopicStore
from tierlog.coordinator.restored_groups import save_restored_groups
from tierlog.partition_state.store import PartitionStateStore
from tierlog.replication.placement import Racks, check_assignment
from tierlog.replication.topic_changes import create_topic
from tierlog.storage.checkpoints import atomic_write
from tierlog.storage.errors import DataDirNotEmptyError, UnknownTopicOrPartitionError
from tierlog.storage.tier.group_offsets import GroupOffsets, clamp_offset, load_group_offsets
from tierlog.storage.tier.manifest_store import load_view
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.tier_state import TierState, tier_state_at
from tierlog.storage.tier.topic_records import TopicRecord, load_topic_records
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "LOCAL_OUTPUT_LOG",
    "RESTORE_MARKER",
    "RestoreTopic",
    "begin_restore",
    "check_empty",
    "next_leader_epochs",
    "restore_locally",
    "restore_replicated",
    "restore_topics",
    "restored_assignment",
    "restored_groups",
    "restored_replication_factor",
]

log = logging.getLogger(__name__)

RESTORE_MARKER = "tierlog-restored"
_STARTED, _DONE = "started", "done"
# The output a broker of ``tierlog cluster up`` writes in its data dir, from its start.
LOCAL_OUTPUT_LOG = "tierlog-sidecar.log"
# What an empty data dir may hold: a new volume's ``lost+found`` (mkfs.ext4 makes
# it), and a local broker's output.
_EMPTY_VOLUME_ENTRIES = frozenset({"lost+found", LOCAL_OUTPUT_LOG})

# Makes one topic the tier holds; False when it was made already.
RestoreTopic = Callable[[TopicRecord], bool]


def check_empty(log_dirs: Sequence[Path]) -> None:
    """``DataDirNotEmptyError`` naming the first log dir that holds anything."""
    for log_dir in log_dirs:
        if not log_dir.exists():
            continue
        found = sorted(p.name for p in log_dir.iterdir() if p.name not in _EMPTY_VOLUME_ENTRIES)
        if found:
            shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
            raise DataDirNotEmptyError(
                f"restore from the tier needs empty log dirs, but {log_dir} holds {shown} "
                "and no finished restore of its own"
            )


def begin_restore(log_dirs: Sequence[Path]) -> bool:
    """Whether this broker has topics to restore (blocking): False when its restore was
    done before; else the log dirs are checked empty (unless a restore had started)
    and marked ``started``, before anything else writes to them."""
    marker = log_dirs[0] / RESTORE_MARKER
    state = marker.read_text().strip() if marker.exists() else None
    if state == _DONE:
        log.info("%s: restored from the tier before; starting as usual", marker)
        return False
    if state != _STARTED:
        check_empty(log_dirs)
        marker.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(marker, f"{_STARTED}\n")
    return True


def restore_topics(
    log_dirs: Sequence[Path], store: ObjectStore, restore: RestoreTopic
) -> list[str]:
    """Make each topic the tier holds with ``restore`` (blocking), then mark the restore
    done; the names of the topics made here (not those found made already)."""
    records = [record for record in load_topic_records(store) if not _turned_off(record)]
    restored = [record.name for record in records if restore(record)]
    producer_ids = [
        producer.producer_id
        for record in records
        for state in _tier_states(store, record)
        for producer in state.producers
    ]
    if producer_ids:  # before a producer may ask this broker for an id
        reserve_past(log_dirs, max(producer_ids))
    groups = restored_groups(store, records)
    save_restored_groups(log_dirs[0], groups, int(time.time() * 1000))
    atomic_write(log_dirs[0] / RESTORE_MARKER, f"{_DONE}\n")
    log.info("kept the offsets of %d groups from %s to commit again", len(groups), store.url)
    log.info("restored %d topics from %s", len(restored), store.url)
    return restored


def _turned_off(record: TopicRecord) -> bool:
    """A record an older version kept of a topic whose tiering was turned off (KIP-950):
    the tier's copy of it was deleted, so there is nothing to restore it from."""
    turned_off = record.configs.get("remote.storage.enable", "").strip().lower() == "false"
    if turned_off:
        log.info("not restoring topic %r: its tiering was turned off", record.name)
    return turned_off


def restored_groups(store: ObjectStore, records: Sequence[TopicRecord]) -> list[GroupOffsets]:
    """The groups' offsets the tier keeps of the restored topics, each clamped to what
    its restored partition holds: the tier's log start to its end (``clamp_offset``)."""
    partition_counts = {record.name: record.partition_count for record in records}
    ranges: dict[TopicPartition, tuple[int, int]] = {}
    groups = []
    for group in load_group_offsets(store):
        offsets = {}
        for tp, committed in group.offsets.items():
            if tp.partition >= partition_counts.get(tp.topic, 0):
                continue  # of a topic not restored (its tiering was turned off)
            if tp not in ranges:
                view = load_view(store, tp)
                ranges[tp] = (view.log_start_offset, view.end_offset)
            clamped = clamp_offset(committed.offset, *ranges[tp])
            offsets[tp] = dataclasses.replace(committed, offset=clamped)
        if offsets:
            groups.append(GroupOffsets(group.group_id, offsets))
    return groups


def restore_locally(topics: TopicStore) -> RestoreTopic:
    """A broker without replication: the topic in its own topic store."""

    def restore(record: TopicRecord) -> bool:
        try:
            topics.get(record.name)
            return False  # made before a crash interrupted the restore
        except UnknownTopicOrPartitionError:
            pass
        _log_restoring(record)
        topics.create(record.name, record.partition_count, dict(record.configs))
        return True

    return restore


def restore_replicated(
    state_store: PartitionStateStore,
    racks: Racks,
    topics: TopicStore,
    store: ObjectStore,
    default_replication_factor: int,
) -> RestoreTopic:
    """A replicated broker of the brokers ``racks`` names: the topic in the
    partition-state store, its replicas where the lost cluster had them
    (``restored_assignment``) or else placed as for any new topic (as many as the lost
    cluster gave it), each partition led first in the epoch after the tier's last."""

    def restore(record: TopicRecord) -> bool:
        if record.name in state_store.list_topics():
            return False  # another broker of the cluster restored it first
        _log_restoring(record)
        assignment = restored_assignment(record, racks)
        factor = restored_replication_factor(record, default_replication_factor)
        try:
            create_topic(
                state_store,
                topics,
                racks,
                record.name,
                record.partition_count,
                factor,
                record.configs,
                assignment=assignment,
                leader_epochs=next_leader_epochs(store, record),
            )
        except TopicAlreadyExistsError:
            return False
        except InvalidReplicationFactorError as error:
            raise InvalidReplicationFactorError(
                f"cannot restore topic {record.name!r} with {factor} replicas a partition: "
                f"{error}; restore into a cluster with at least that many brokers"
            ) from None
        return True

    return restore


def restored_assignment(
    record: TopicRecord, racks: Racks
) -> list[tuple[int, tuple[int, ...]]] | None:
    """Each partition's replicas as the lost cluster had them, for a cluster with
    brokers of those ids (``racks``); None, logged, to place the topic as a new one: a
    record that keeps no assignment (an older version's, an unreplicated broker's) or
    one this cluster cannot take (a broker it lacks, partitions of unequal replica
    counts, as a reassignment to another factor interrupted by the loss leaves)."""
    if record.assignment is None:
        log.info("topic %r: the tier's record keeps no assignment; placing it anew", record.name)
        return None
    assignment = list(enumerate(record.assignment))
    try:
        check_assignment(racks, assignment)
    except InvalidReplicaAssignmentError as error:
        log.warning(
            "topic %r: the lost cluster's assignment does not fit this one's brokers %s (%s); "
            "placing its replicas as for a new topic",
            record.name,
            sorted(racks),
            error,
        )
        return None
    return assignment


def restored_replication_factor(record: TopicRecord, default: int) -> int:
    """The replicas a partition had on the lost cluster; ``default``
    (``default.replication.factor``) for a record that does not say, written by an
    older version or by a broker without replication."""
    if record.replication_factor is not None:
        return record.replication_factor
    log.warning(
        "topic %r: the tier's record keeps no replication factor (written by an older "
        "version or an unreplicated broker); restoring it with default.replication.factor=%d",
        record.name,
        default,
    )
    return default


def next_leader_epochs(store: ObjectStore, record: TopicRecord) -> dict[int, int]:
    """For each partition, one past the last leader epoch the tier recorded (0 when it
    holds nothing of the partition)."""
    epochs = {}
    for partition, state in enumerate(_tier_states(store, record)):
        recorded = state.leader_epochs
        epochs[partition] = recorded[-1][0] + 1 if recorded else 0
    return epochs


def _tier_states(store: ObjectStore, record: TopicRecord) -> list[TierState]:
    """What the tier leaves at its end of each of the topic's partitions, in order."""
    states = []
    for partition in range(record.partition_count):
        view = load_view(store, TopicPartition(record.name, partition))
        states.append(tier_state_at(store, view, view.end_offset))
    return states


def _log_restoring(record: TopicRecord) -> None:
    log.info(
        "restoring topic %r: %d partitions, overrides %s",
        record.name,
        record.partition_count,
        dict(record.configs) or "none",
    )
