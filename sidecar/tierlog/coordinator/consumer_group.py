"""One KIP-848 consumer group: its state as its records say, and its heartbeat.

The state is exactly what replaying the group's records gives (``replay``): the group
epoch, each member's subscription, the target assignment (its epoch and each member's
target) and each member's current assignment; which member holds which partition is
derived from the current assignments. A change never edits that state directly: a
heartbeat or a removal *computes the records* that say it, on a draft (a copy the records
are replayed onto as they are made), and the caller writes them to the log and replays
them onto the group once acknowledged, as offsets are. Calls on one group must not
overlap (the coordinator holds a lock per group).

A heartbeat, as Kafka's coordinator runs it:

1. the member: a new one (epoch 0; a static member taking over its instance's
   assignment if that member left with epoch -2), or a known one whose epoch is checked
   (fenced unless it is the current epoch, or the previous one with no partition beyond
   its assignment); leaving is epoch -1 (gone) or -2 (a static member, kept until its
   session times out or it comes back);
2. its subscription: a change of it, or a new or departed member, bumps the group epoch,
   as does a change of the subscribed topics' partitions (their metadata hash);
3. the target: when the group epoch is past the target's epoch, the assignor computes a
   new target for every member, at the group epoch;
4. the member's current assignment reconciled toward its target (``current_assignment``).

Liveness is not in the records: ``last_seen_ms`` per member is reset when a coordinator
loads the group, as Kafka's session timers restart on a new coordinator. Nor is how long
a member has been asked to revoke partitions (``revoking_since_ms``): one that keeps
them past its rebalance timeout is removed, so the others are not kept waiting.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tierlog.api.errors import (
    FencedMemberEpochError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InvalidRequestError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
)
from tierlog.coordinator.assignment import (
    EMPTY_ASSIGNMENT,
    Assignment,
    TopicIdPartition,
    from_records,
    to_records,
)
from tierlog.coordinator.assignors import DEFAULT_ASSIGNOR, GroupSpec, MemberSpec, assignor_named
from tierlog.coordinator.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    MemberState,
)
from tierlog.coordinator.current_assignment import MemberAssignment, reconcile
from tierlog.coordinator.group_records import CoordinatorRecord
from tierlog.storage.errors import TierlogError

__all__ = [
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "STATIC_LEAVE_EPOCH",
    "ConsumerGroup",
    "GroupState",
    "Heartbeat",
    "HeartbeatAnswer",
    "TopicImage",
    "TopicInfo",
    "answer_topics",
    "consumer_group_of",
]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@dataclass(frozen=True)
class TopicInfo:
    topic_id: uuid.UUID
    partition_count: int


# The cluster's topics by name (internal ones too), as the coordinator sees them now.
TopicImage = Mapping[str, TopicInfo]


@dataclass(frozen=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat; None fields are "unchanged since the last one"."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    assignment: Assignment


class GroupState:
    """Kafka's names for a consumer group's state (DescribeGroups, ListGroups)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    target_epoch: int = 0
    subscriptions: dict[str, ConsumerGroupMemberMetadataValue] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    current: dict[str, MemberAssignment] = field(default_factory=dict)
    owners: dict[TopicIdPartition, str] = field(default_factory=dict)
    last_seen_ms: dict[str, int] = field(default_factory=dict)
    revoking_since_ms: dict[str, int] = field(default_factory=dict)
    exists: bool = False  # a group epoch record was replayed and not deleted

    # -- the records ------------------------------------------------------------------

    def replay(self, record: CoordinatorRecord) -> None:
        """Apply one of this group's records (``consumer_group_of``)."""
        key, value = record.key, record.value
        if isinstance(key, ConsumerGroupMetadataKey):
            if value is None:
                self.exists, self.group_epoch, self.metadata_hash = False, 0, 0
            else:
                assert isinstance(value, ConsumerGroupMetadataValue)
                self.exists = True
                self.group_epoch, self.metadata_hash = value.epoch, value.metadata_hash
        elif isinstance(key, ConsumerGroupMemberMetadataKey):
            if value is None:
                self.subscriptions.pop(key.member_id, None)
                self.last_seen_ms.pop(key.member_id, None)
                self.revoking_since_ms.pop(key.member_id, None)
            else:
                assert isinstance(value, ConsumerGroupMemberMetadataValue)
                self.subscriptions[key.member_id] = value
        elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
            if value is not None:
                assert isinstance(value, ConsumerGroupTargetAssignmentMetadataValue)
                self.target_epoch = value.assignment_epoch
        elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            if value is None:
                self.targets.pop(key.member_id, None)
            else:
                assert isinstance(value, ConsumerGroupTargetAssignmentMemberValue)
                self.targets[key.member_id] = from_records(value.topic_partitions)
        elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
            self._replay_current(key.member_id, value)

    def _replay_current(self, member_id: str, value: object) -> None:
        old = self.current.pop(member_id, None)
        if old is not None:
            for tp in old.held:
                if self.owners.get(tp) == member_id:
                    del self.owners[tp]
        if value is None:
            return
        assert isinstance(value, ConsumerGroupCurrentMemberAssignmentValue)
        state = value.state if value.state in MemberState._value2member_map_ else 127
        assignment = MemberAssignment(
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=MemberState(state),
            assigned=from_records(value.assigned_partitions),
            pending_revocation=from_records(value.partitions_pending_revocation),
        )
        self.current[member_id] = assignment
        for tp in assignment.held:
            self.owners[tp] = member_id

    # -- questions --------------------------------------------------------------------

    @property
    def members(self) -> list[str]:
        return sorted(self.subscriptions)

    def state(self) -> str:
        if not self.subscriptions:
            return GroupState.EMPTY
        if self.target_epoch < self.group_epoch:
            return GroupState.ASSIGNING
        for member in self.current.values():
            if member.state != MemberState.STABLE or member.member_epoch != self.target_epoch:
                return GroupState.RECONCILING
        return GroupState.STABLE

    def subscribed_topics(self, topics: TopicImage) -> set[str]:
        """The existing topics some member subscribes to, by name or by its regex."""
        return {
            name
            for subscription in self.subscriptions.values()
            for name in _resolve(subscription, topics)
        }

    def assignor(self) -> str:
        """The assignor most members ask for (ties: by name), else the default."""
        asked = [s.server_assignor for s in self.subscriptions.values() if s.server_assignor]
        if not asked:
            return DEFAULT_ASSIGNOR
        return min(set(asked), key=lambda name: (-asked.count(name), name))

    def member_epoch(self, member_id: str) -> int | None:
        current = self.current.get(member_id)
        return None if current is None else current.member_epoch

    def check_commit(self, member_id: str, member_epoch: int) -> None:
        """An OffsetCommit against this group, as Kafka checks a KIP-848 group's: with no
        member and epoch -1 only while the group is empty, else from a member at its
        current epoch (STALE_MEMBER_EPOCH: it must heartbeat to catch up first)."""
        if member_epoch < 0 and not member_id and not self.subscriptions:
            return
        current = self.current.get(member_id)
        if current is None or member_id not in self.subscriptions:
            raise UnknownMemberIdError(
                f"group {self.group_id!r} has no member {member_id!r}"
                + (" (it has members: commit as one of them)" if not member_id else "")
            )
        if member_epoch != current.member_epoch:
            raise StaleMemberEpochError(
                f"member {member_id!r} committed at epoch {member_epoch}, its epoch is "
                f"{current.member_epoch}"
            )

    def check_fetch(self, member_id: str | None, member_epoch: int) -> None:
        """An OffsetFetch (v9+) against this group, as Kafka checks it: without a member
        and an epoch (an admin, or an older client) it passes; else it must come from a
        member (UNKNOWN_MEMBER_ID) at its epoch (FENCED_MEMBER_EPOCH ahead of it,
        STALE_MEMBER_EPOCH behind)."""
        if member_id is None and member_epoch < 0:
            return
        self._check_epoch(member_id or "", member_epoch, "fetched", StaleMemberEpochError)

    def check_transactional_commit(self, member_id: str, member_epoch: int) -> None:
        """A TxnOffsetCommit against this group, as Kafka checks it (KIP-447): the member
        is optional ("" and -1 pass); given, it must be a member (UNKNOWN_MEMBER_ID), not
        ahead of its epoch (FENCED_MEMBER_EPOCH) nor behind it (ILLEGAL_GENERATION, the
        call's name for a stale epoch)."""
        if member_epoch < 0 and not member_id:
            return
        self._check_epoch(member_id, member_epoch, "committed", IllegalGenerationError)

    def _check_epoch(
        self, member_id: str, member_epoch: int, did: str, stale: type[TierlogError]
    ) -> None:
        """``member_id`` a member (UNKNOWN_MEMBER_ID) at ``member_epoch``: ahead of it
        FENCED_MEMBER_EPOCH, behind it ``stale`` (each call names a stale epoch its way)."""
        current = self.current.get(member_id)
        if current is None or member_id not in self.subscriptions:
            raise UnknownMemberIdError(f"group {self.group_id!r} has no member {member_id!r}")
        if member_epoch > current.member_epoch:
            raise FencedMemberEpochError(
                f"member {member_id!r} {did} at epoch {member_epoch}, ahead of its "
                f"epoch {current.member_epoch}"
            )
        if member_epoch < current.member_epoch:
            raise stale(
                f"member {member_id!r} {did} at epoch {member_epoch}, its epoch is "
                f"{current.member_epoch}"
            )

    def touch(self, member_id: str, now_ms: int) -> None:
        """A heartbeat of the member was answered at ``now_ms``."""
        if member_id not in self.subscriptions:
            return
        self.last_seen_ms[member_id] = now_ms
        current = self.current.get(member_id)
        if current is not None and current.state == MemberState.UNREVOKED_PARTITIONS:
            self.revoking_since_ms.setdefault(member_id, now_ms)
        else:
            self.revoking_since_ms.pop(member_id, None)

    def expired_members(self, now_ms: int, session_timeout_ms: int) -> list[str]:
        """Members not heard from for a session timeout (a static member that left
        with epoch -2 included: it had that long to come back), and members still
        holding partitions they were told to revoke a rebalance timeout ago (the
        session timeout where they named none). A member not seen since this
        coordinator loaded the group starts its session now."""
        for member_id in self.subscriptions:
            self.last_seen_ms.setdefault(member_id, now_ms)
        return sorted(
            member_id
            for member_id in self.subscriptions
            if self._deadline_ms(member_id, session_timeout_ms) <= now_ms
        )

    def next_expiry_ms(self, session_timeout_ms: int) -> int | None:
        """When the first member expires if none is heard from again (None: no member
        whose session has started); a coordinator looks at ``expired_members`` then."""
        deadlines = [
            self._deadline_ms(member_id, session_timeout_ms)
            for member_id in self.subscriptions
            if member_id in self.last_seen_ms
        ]
        return min(deadlines, default=None)

    def _deadline_ms(self, member_id: str, session_timeout_ms: int) -> int:
        """The end of the member's session, or of its time to revoke if sooner."""
        deadline_ms = self.last_seen_ms[member_id] + session_timeout_ms
        revoking_since_ms = self.revoking_since_ms.get(member_id)
        if revoking_since_ms is None:
            return deadline_ms
        rebalance_timeout_ms = self.subscriptions[member_id].rebalance_timeout_ms
        if rebalance_timeout_ms <= 0:
            rebalance_timeout_ms = session_timeout_ms
        return min(deadline_ms, revoking_since_ms + rebalance_timeout_ms)

    # -- changes: records computed on a draft -----------------------------------------

    def heartbeat(
        self,
        request: Heartbeat,
        topics: TopicImage,
        *,
        max_size: int,
        new_member_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> tuple[list[CoordinatorRecord], HeartbeatAnswer]:
        """The records a heartbeat writes, and its answer once they are written."""
        draft = _Draft(self)
        member_id = request.member_id
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return draft.leave(request, topics)
        if request.member_epoch == JOIN_EPOCH:
            member_id = draft.join(request, max_size, new_member_id)
        else:
            draft.check_epoch(request)
        draft.update_subscription(member_id, request)
        draft.bump_epoch_if_needed(topics)
        draft.update_target(topics)
        draft.reconcile(member_id, request.owned)
        current = draft.group.current[member_id]
        return draft.records, HeartbeatAnswer(member_id, current.member_epoch, current.assigned)

    def remove(self, member_id: str, topics: TopicImage) -> list[CoordinatorRecord]:
        """The records of a member fenced (session or rebalance timeout)."""
        draft = _Draft(self)
        draft.remove_member(member_id)
        draft.bump_epoch_if_needed(topics)
        return draft.records

    def delete(self) -> list[CoordinatorRecord]:
        """Tombstones for an empty group's records (DeleteGroups, offsets expiry)."""
        return [
            CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(self.group_id), None),
            CoordinatorRecord(ConsumerGroupMetadataKey(self.group_id), None),
        ]


class _Draft:
    """A copy of the group the new records are replayed onto as they are made."""

    def __init__(self, group: ConsumerGroup) -> None:
        self.group = copy.deepcopy(group)
        self.records: list[CoordinatorRecord] = []
        self.force_bump = False

    def emit(self, record: CoordinatorRecord) -> None:
        self.records.append(record)
        self.group.replay(record)

    @property
    def group_id(self) -> str:
        return self.group.group_id

    # -- the member -------------------------------------------------------------------

    def join(self, request: Heartbeat, max_size: int, new_member_id: Callable[[], str]) -> str:
        group = self.group
        member_id = request.member_id or new_member_id()
        if request.instance_id is not None:
            holder = self._static_member(request.instance_id)
            if holder is not None and holder != member_id:
                if group.member_epoch(holder) != STATIC_LEAVE_EPOCH:
                    raise UnreleasedInstanceIdError(
                        f"group {self.group_id!r}: instance {request.instance_id!r} is held "
                        f"by live member {holder!r}"
                    )
                self._replace_static_member(holder, member_id)
                return member_id
        if member_id in group.subscriptions:
            # Joining again (epoch 0) means it let go of everything: start it afresh.
            self.emit(_current_record(self.group_id, member_id, MemberAssignment(0, 0)))
            return member_id
        if len(group.subscriptions) >= max_size:
            raise GroupMaxSizeReachedError(
                f"group {self.group_id!r} has {len(group.subscriptions)} members, the "
                f"most group.consumer.max.size ({max_size}) allows"
            )
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise InvalidRequestError("a joining member must subscribe to topics or a regex")
        self.emit(_current_record(self.group_id, member_id, MemberAssignment(0, 0)))
        self.force_bump = True
        return member_id

    def _static_member(self, instance_id: str) -> str | None:
        for member_id, subscription in self.group.subscriptions.items():
            if subscription.instance_id == instance_id:
                return member_id
        return None

    def _replace_static_member(self, old_id: str, new_id: str) -> None:
        """The new incarnation of a static member takes over the old one's subscription,
        target and partitions, without a rebalance (Kafka's static membership)."""
        group = self.group
        subscription = group.subscriptions[old_id]
        target = group.targets.get(old_id, EMPTY_ASSIGNMENT)
        current = group.current[old_id]
        self._tombstone_member(old_id)
        self.emit(
            CoordinatorRecord(ConsumerGroupMemberMetadataKey(self.group_id, new_id), subscription)
        )
        self.emit(_target_record(self.group_id, new_id, target))
        # At the epoch it had before it left (kept as the previous one by the -2): the
        # target may have moved on meanwhile, and the reconciliation takes it there.
        epoch = current.member_epoch
        if epoch == STATIC_LEAVE_EPOCH:
            epoch = current.previous_member_epoch
        resumed = MemberAssignment(
            member_epoch=epoch,
            previous_member_epoch=epoch,
            state=current.state,
            assigned=current.assigned,
            pending_revocation=current.pending_revocation,
        )
        self.emit(_current_record(self.group_id, new_id, resumed))

    def check_epoch(self, request: Heartbeat) -> None:
        group, member_id, epoch = self.group, request.member_id, request.member_epoch
        current = group.current.get(member_id)
        if current is None or member_id not in group.subscriptions:
            raise UnknownMemberIdError(f"group {self.group_id!r} has no member {member_id!r}")
        if epoch > current.member_epoch:
            raise FencedMemberEpochError(
                f"member {member_id!r} sent epoch {epoch}, ahead of its epoch "
                f"{current.member_epoch}: it must give up its partitions and join again"
            )
        if epoch < current.member_epoch:
            owned = request.owned
            crossed = epoch == current.previous_member_epoch and (
                owned is None or owned <= current.assigned
            )
            if not crossed:
                raise FencedMemberEpochError(
                    f"member {member_id!r} sent epoch {epoch}, behind its epoch "
                    f"{current.member_epoch}: it must give up its partitions and join again"
                )

    def update_subscription(self, member_id: str, request: Heartbeat) -> None:
        """The member's record with what the heartbeat changed (its None fields and a
        rebalance timeout of -1 change nothing); a new subscription bumps the epoch."""
        old = self.group.subscriptions.get(member_id)
        base = old or ConsumerGroupMemberMetadataValue("", "", classic_member_metadata=None)
        changes: dict[str, Any] = {}
        if request.subscribed_topic_names is not None or request.subscribed_topic_regex:
            if request.subscribed_topic_regex:
                _check_regex(request.subscribed_topic_regex)
            changes["subscribed_topic_names"] = tuple(
                sorted(set(request.subscribed_topic_names or ()))
            )
            changes["subscribed_topic_regex"] = request.subscribed_topic_regex or None
        if request.server_assignor is not None:
            assignor_named(request.server_assignor)
        for name in ("client_id", "client_host"):
            if getattr(request, name):
                changes[name] = getattr(request, name)
        for name in ("instance_id", "rack_id", "server_assignor"):
            if getattr(request, name) is not None:
                changes[name] = getattr(request, name)
        if request.rebalance_timeout_ms != -1:
            changes["rebalance_timeout_ms"] = request.rebalance_timeout_ms
        new = dataclasses.replace(base, **changes)
        if new == old:
            return
        self.emit(CoordinatorRecord(ConsumerGroupMemberMetadataKey(self.group_id, member_id), new))
        if old is None or _subscription_of(old) != _subscription_of(new):
            self.force_bump = True

    def leave(
        self, request: Heartbeat, topics: TopicImage
    ) -> tuple[list[CoordinatorRecord], HeartbeatAnswer]:
        group, member_id = self.group, request.member_id
        if member_id not in group.subscriptions:
            raise UnknownMemberIdError(f"group {self.group_id!r} has no member {member_id!r}")
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            if group.subscriptions[member_id].instance_id is None:
                raise InvalidRequestError("only a static member (group.instance.id) leaves with -2")
            current = group.current[member_id]
            kept = MemberAssignment(
                STATIC_LEAVE_EPOCH,
                current.member_epoch,
                current.state,
                current.assigned,
                current.pending_revocation,
            )
            self.emit(_current_record(self.group_id, member_id, kept))
        else:
            self.remove_member(member_id)
            self.bump_epoch_if_needed(topics)
        return self.records, HeartbeatAnswer(member_id, request.member_epoch, EMPTY_ASSIGNMENT)

    def remove_member(self, member_id: str) -> None:
        if member_id not in self.group.subscriptions:
            return
        self._tombstone_member(member_id)
        self.force_bump = True

    def _tombstone_member(self, member_id: str) -> None:
        for key in (
            ConsumerGroupCurrentMemberAssignmentKey(self.group_id, member_id),
            ConsumerGroupTargetAssignmentMemberKey(self.group_id, member_id),
            ConsumerGroupMemberMetadataKey(self.group_id, member_id),
        ):
            self.emit(CoordinatorRecord(key, None))

    # -- the group --------------------------------------------------------------------

    def bump_epoch_if_needed(self, topics: TopicImage) -> None:
        group = self.group
        metadata_hash = _metadata_hash(self.group.subscribed_topics(topics), topics)
        if not (self.force_bump or metadata_hash != group.metadata_hash or not group.exists):
            return
        value = ConsumerGroupMetadataValue(group.group_epoch + 1, metadata_hash)
        self.emit(CoordinatorRecord(ConsumerGroupMetadataKey(self.group_id), value))

    def update_target(self, topics: TopicImage) -> None:
        group = self.group
        if group.target_epoch >= group.group_epoch:
            return
        specs = {
            member_id: MemberSpec(
                frozenset(topics[name].topic_id for name in _resolve(subscription, topics)),
                group.targets.get(member_id, EMPTY_ASSIGNMENT),
            )
            for member_id, subscription in group.subscriptions.items()
        }
        counts = {info.topic_id: info.partition_count for info in topics.values()}
        subscribed = set().union(*(spec.subscribed_topic_ids for spec in specs.values()))
        spec = GroupSpec(specs, {t: n for t, n in counts.items() if t in subscribed})
        targets = assignor_named(self.group.assignor()).assign(spec)
        for member_id in sorted(targets):
            if group.targets.get(member_id) != targets[member_id]:
                self.emit(_target_record(self.group_id, member_id, targets[member_id]))
        value = ConsumerGroupTargetAssignmentMetadataValue(group.group_epoch)
        self.emit(CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(self.group_id), value))

    def reconcile(self, member_id: str, owned: Assignment | None) -> None:
        group = self.group
        current = group.current[member_id]
        target = group.targets.get(member_id, EMPTY_ASSIGNMENT)
        updated = reconcile(member_id, current, group.target_epoch, target, group.owners.get, owned)
        if updated != current:
            self.emit(_current_record(self.group_id, member_id, updated))


def _check_regex(regex: str) -> None:
    try:
        re.compile(regex)
    except re.error as error:
        raise InvalidRequestError(f"subscribed_topic_regex {regex!r}: {error}") from None


def _resolve(subscription: ConsumerGroupMemberMetadataValue, topics: TopicImage) -> list[str]:
    """The existing topics a member subscribes to: its names, and its regex's matches."""
    names = {name for name in subscription.subscribed_topic_names if name in topics}
    if subscription.subscribed_topic_regex:
        pattern = re.compile(subscription.subscribed_topic_regex)
        names |= {name for name in topics if pattern.fullmatch(name)}
    return sorted(names)


def _subscription_of(value: ConsumerGroupMemberMetadataValue) -> tuple[object, ...]:
    """What the assignment depends on: a change of it bumps the group epoch."""
    return (value.subscribed_topic_names, value.subscribed_topic_regex, value.server_assignor)


def _metadata_hash(names: set[str], topics: TopicImage) -> int:
    """A signed 64-bit hash of the subscribed topics' ids and partition counts (ours,
    not Kafka's: it is only ever compared with itself)."""
    if not names:
        return 0
    digest = hashlib.blake2b(digest_size=8)
    for name in sorted(names):
        info = topics[name]
        digest.update(f"{name}\0{info.topic_id}\0{info.partition_count}\n".encode())
    return int.from_bytes(digest.digest(), "big", signed=True) or 1


def _target_record(group_id: str, member_id: str, target: Assignment) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
        ConsumerGroupTargetAssignmentMemberValue(to_records(target)),
    )


def _current_record(
    group_id: str, member_id: str, assignment: MemberAssignment
) -> CoordinatorRecord:
    return CoordinatorRecord(
        ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id),
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=assignment.member_epoch,
            previous_member_epoch=assignment.previous_member_epoch,
            state=assignment.state,
            assigned_partitions=to_records(assignment.assigned),
            partitions_pending_revocation=to_records(assignment.pending_revocation),
        ),
    )


_CONSUMER_GROUP_KEYS = (
    ConsumerGroupMetadataKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
)


def consumer_group_of(record: CoordinatorRecord) -> str | None:
    """The group a KIP-848 membership record is about (None for any other record)."""
    key = record.key
    return key.group_id if isinstance(key, _CONSUMER_GROUP_KEYS) else None


def answer_topics(assignment: Assignment, topics: TopicImage) -> dict[str, list[int]]:
    """An assignment by topic name, for the wire (topics gone since are left out)."""
    names = {info.topic_id: name for name, info in topics.items()}
    by_name: dict[str, list[int]] = {}
    for tp in sorted(assignment):
        name = names.get(tp.topic_id)
        if name is not None:
            by_name.setdefault(name, []).append(tp.partition)
    return by_name
