"""One classic group (JoinGroup/SyncGroup/Heartbeat/LeaveGroup): Kafka's state machine.

    Empty --join--> PreparingRebalance --every member rejoined, or the rebalance
    timeout--> CompletingRebalance --the leader's assignment written--> Stable
    (a join, leave or expiry from CompletingRebalance or Stable prepares a new rebalance;
    the last member gone makes it Empty; DeleteGroups makes it Dead)

A new dynamic member is first given its id and told MEMBER_ID_REQUIRED (KIP-394) and
must join again with it within its session timeout; a static member (``group.instance.id``)
joins at once and keeps its place when it comes back with a new member id. A rebalance
out of Empty waits ``group.initial.rebalance.delay.ms`` (extended by that much per new
member, up to the rebalance timeout) so a starting fleet lands in one generation.
Completing a join bumps the generation, picks the protocol every member supports (the
one most members prefer) and hands the leader every member's metadata for it.

JoinGroup and SyncGroup are long polls: each returns an asyncio future the state
machine completes when the rebalance gets there. The calls are synchronous and must not
overlap (the coordinator holds a lock per group); what they change that the log keeps,
the coordinator writes as the group's ``GroupMetadataValue`` (``record``): the leader's
assignment of each generation and the group emptied. A group loaded from the log is
Stable at its generation (Empty without members), its members' sessions starting then.
Deadlines are not timers: the coordinator's expiry loop asks ``next_deadline_ms`` and
calls ``expire``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tierlog.api.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from tierlog.coordinator.classic_group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
)
from tierlog.coordinator.group_records import CoordinatorRecord
from tierlog.storage.errors import TierlogError

__all__ = [
    "ClassicGroup",
    "ClassicGroupState",
    "ClassicMember",
    "JoinAnswer",
    "JoinRequest",
    "JoinedMember",
    "Timeouts",
]


class ClassicGroupState:
    """Kafka's names for a classic group's state (DescribeGroups, ListGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class Timeouts:
    """The broker's bounds on a classic group's waits."""

    initial_rebalance_delay_ms: int


@dataclass(frozen=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's preference
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True  # JoinGroup v4+ (KIP-394)


@dataclass(frozen=True)
class JoinedMember:
    """A member as the leader sees it: its metadata for the chosen protocol."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinAnswer:
    generation: int
    protocol_type: str
    protocol_name: str | None
    leader: str
    member_id: str
    members: tuple[JoinedMember, ...] = ()  # the leader's answer only


@dataclass
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    last_seen_ms: int | None = None  # None: not heard from since this coordinator loaded it
    join_waiter: asyncio.Future[JoinAnswer] | None = None
    sync_waiter: asyncio.Future[bytes] | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return dict(self.protocols).get(protocol or "", b"")

    def is_waiting(self) -> bool:
        return any(w is not None and not w.done() for w in (self.join_waiter, self.sync_waiter))


@dataclass
class ClassicGroup:
    group_id: str
    state: str = ClassicGroupState.EMPTY
    protocol_type: str | None = None
    protocol: str | None = None
    generation: int = 0
    leader: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    # KIP-394: member ids handed out, and when each must have joined with it.
    pending: dict[str, int] = field(default_factory=dict)
    # PreparingRebalance: when the join completes anyway; CompletingRebalance: when
    # members that did not sync are dropped.
    deadline_ms: int | None = None
    initial_delay_until_ms: int | None = None  # a rebalance out of Empty: its cap

    # -- the log ----------------------------------------------------------------------

    @classmethod
    def loaded(cls, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        """The group as a coordinator loading ``value`` takes it over."""
        members = {
            m.member_id: ClassicMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                protocols=((value.protocol or "", m.subscription),),
                assignment=m.assignment,
            )
            for m in value.members
        }
        return cls(
            group_id=group_id,
            state=ClassicGroupState.STABLE if members else ClassicGroupState.EMPTY,
            protocol_type=value.protocol_type,
            protocol=value.protocol,
            generation=value.generation,
            leader=value.leader,
            members=members,
        )

    def record(self, now_ms: int) -> CoordinatorRecord:
        """The group's ``GroupMetadataValue`` as it stands."""
        members = tuple(
            MemberMetadata(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata(self.protocol),
                assignment=m.assignment,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                group_instance_id=m.group_instance_id,
            )
            for m in self.members.values()
        )
        value = GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol,
            leader=self.leader,
            members=members,
            current_state_timestamp_ms=now_ms,
        )
        return CoordinatorRecord(GroupMetadataKey(self.group_id), value)

    # -- questions --------------------------------------------------------------------

    def is_empty(self) -> bool:
        return not self.members and not self.pending

    def static_member(self, instance_id: str) -> str | None:
        for member in self.members.values():
            if member.group_instance_id == instance_id:
                return member.member_id
        return None

    def check_member(self, member_id: str, instance_id: str | None) -> ClassicMember:
        """The member a call names: UNKNOWN_MEMBER_ID, or FENCED_INSTANCE_ID when its
        instance id belongs to another member now."""
        if self.state == ClassicGroupState.DEAD:
            raise CoordinatorNotAvailableError(f"group {self.group_id!r} is being deleted")
        if instance_id is not None:
            holder = self.static_member(instance_id)
            if holder is not None and holder != member_id:
                raise FencedInstanceIdError(
                    f"group {self.group_id!r}: instance {instance_id!r} is member {holder!r} "
                    f"now, not {member_id!r}"
                )
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"group {self.group_id!r} has no member {member_id!r}")
        return member

    def check_generation(self, generation: int) -> None:
        if generation != self.generation:
            raise IllegalGenerationError(
                f"group {self.group_id!r} is at generation {self.generation}, not {generation}"
            )

    def check_commit(self, member_id: str, instance_id: str | None, generation: int) -> None:
        """An OffsetCommit from this group's member (or, to an Empty group, from no
        member at generation -1), as Kafka checks a classic group's."""
        if self.state == ClassicGroupState.DEAD:
            raise CoordinatorNotAvailableError(f"group {self.group_id!r} is being deleted")
        if generation < 0 and not member_id and self.state == ClassicGroupState.EMPTY:
            return
        self.check_member(member_id, instance_id)
        self.check_generation(generation)
        if self.state == ClassicGroupState.COMPLETING_REBALANCE:
            raise RebalanceInProgressError(
                f"group {self.group_id!r} is waiting for its leader's assignment"
            )

    def check_transactional_commit(
        self, member_id: str, instance_id: str | None, generation: int
    ) -> None:
        """A TxnOffsetCommit against this group, as Kafka checks a classic group's
        (KIP-447): the member is optional (no member, no instance and generation -1
        pass); given, it must be a member at the group's generation. Unlike OffsetCommit
        it is not refused mid-rebalance: the producer's transaction must still end."""
        if self.state == ClassicGroupState.DEAD:
            raise CoordinatorNotAvailableError(f"group {self.group_id!r} is being deleted")
        if generation < 0 and not member_id and instance_id is None:
            return
        self.check_member(member_id, instance_id)
        self.check_generation(generation)

    def next_deadline_ms(self) -> int | None:
        """When ``expire`` has something to do if no one is heard from meanwhile."""
        deadlines = [*self.pending.values()]
        if self.deadline_ms is not None:
            deadlines.append(self.deadline_ms)
        deadlines.extend(
            member.last_seen_ms + member.session_timeout_ms
            for member in self.members.values()
            if member.last_seen_ms is not None and not member.is_waiting()
        )
        return min(deadlines, default=None)

    # -- the calls --------------------------------------------------------------------

    def join(
        self, request: JoinRequest, now_ms: int, timeouts: Timeouts
    ) -> asyncio.Future[JoinAnswer]:
        """A JoinGroup: its answer, once the rebalance it joins completes."""
        self._check_protocols(request)
        if request.member_id:
            return self._join_known(request, now_ms, timeouts)
        if request.group_instance_id is not None:
            return self._join_static(request, now_ms, timeouts)
        member_id = f"{request.client_id}-{uuid.uuid4()}"
        if request.require_known_member_id:
            self.pending[member_id] = now_ms + request.session_timeout_ms
            raise MemberIdRequiredError(member_id)
        return self._add(member_id, request, now_ms, timeouts)

    def sync(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        assignments: dict[str, bytes],
        now_ms: int,
        *,
        protocol: tuple[str | None, str | None] = (None, None),
    ) -> tuple[asyncio.Future[bytes], bool]:
        """A SyncGroup: its answer (the member's assignment), and whether the group's
        record must be written first (the leader's assignment: then
        ``assignment_written``). ``protocol`` (type, name: v5+) must be the group's."""
        member = self.check_member(member_id, instance_id)
        self.check_generation(generation)
        protocol_type, protocol_name = protocol
        if protocol_type not in (None, self.protocol_type) or protocol_name not in (
            None,
            self.protocol,
        ):
            raise InconsistentGroupProtocolError(
                f"group {self.group_id!r} runs {self.protocol_type!r} {self.protocol!r}, "
                f"not {protocol_type!r} {protocol_name!r}"
            )
        member.last_seen_ms = now_ms
        if self.state == ClassicGroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {self.group_id!r} is rebalancing")
        waiter: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        if self.state == ClassicGroupState.STABLE:
            waiter.set_result(member.assignment)
            return waiter, False
        member.sync_waiter = waiter
        if member_id != self.leader:
            return waiter, False
        for other in self.members.values():
            other.assignment = assignments.get(other.member_id, b"")
        return waiter, True

    def assignment_written(self, now_ms: int) -> None:
        """The leader's assignment is in the log: every member syncing gets its share."""
        self.state = ClassicGroupState.STABLE
        self.deadline_ms = None
        for member in self.members.values():
            member.last_seen_ms = now_ms
            if member.sync_waiter is not None and not member.sync_waiter.done():
                member.sync_waiter.set_result(member.assignment)
            member.sync_waiter = None

    def assignment_failed(self, error: TierlogError, now_ms: int) -> None:
        """Writing the assignment failed: the members are told, and rebalance."""
        for member in self.members.values():
            _fail(member.sync_waiter, error)
            member.sync_waiter = None
            member.assignment = b""
        self._prepare_rebalance(now_ms)

    def heartbeat(
        self, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> None:
        """A Heartbeat: the member's session goes on, or it is told to rejoin."""
        member = self.check_member(member_id, instance_id)
        self.check_generation(generation)
        member.last_seen_ms = now_ms
        if self.state == ClassicGroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {self.group_id!r} is rebalancing: rejoin")

    def leave(self, member_id: str, instance_id: str | None, now_ms: int) -> bool:
        """A LeaveGroup of one member (named by its id, or by its instance id alone);
        whether the group emptied (its record is then written)."""
        if instance_id is not None and not member_id:
            found = self.static_member(instance_id)
            if found is None:
                raise UnknownMemberIdError(
                    f"group {self.group_id!r} has no member with instance {instance_id!r}"
                )
            member_id = found
        if member_id in self.pending and instance_id is None:
            del self.pending[member_id]
            self._complete_join_if_ready(now_ms)
            return False
        self.check_member(member_id, instance_id)
        self._remove(member_id, now_ms)
        return not self.members

    def expire(self, now_ms: int) -> bool:
        """Drop members and pending ids past their sessions, complete a join past its
        deadline, drop members that did not sync in time; whether the group emptied
        (its record is then written)."""
        was_empty = self.state == ClassicGroupState.EMPTY
        for member_id, until_ms in list(self.pending.items()):
            if until_ms <= now_ms:
                del self.pending[member_id]
        for member in list(self.members.values()):
            if member.last_seen_ms is None:
                member.last_seen_ms = now_ms  # loaded: its session starts now
            elif (
                not member.is_waiting()
                and member.last_seen_ms + member.session_timeout_ms <= now_ms
            ):
                self._remove(member.member_id, now_ms)
        if self.deadline_ms is not None and self.deadline_ms <= now_ms:
            if self.state == ClassicGroupState.PREPARING_REBALANCE:
                self._complete_join(now_ms)
            elif self.state == ClassicGroupState.COMPLETING_REBALANCE:
                for member in list(self.members.values()):
                    if member.sync_waiter is None:
                        self._remove(member.member_id, now_ms)
                if self.state == ClassicGroupState.COMPLETING_REBALANCE:
                    self._prepare_rebalance(now_ms)
        else:
            self._complete_join_if_ready(now_ms)
        return not was_empty and self.state == ClassicGroupState.EMPTY

    def kill(self, error: TierlogError) -> None:
        """The group is deleted or no longer coordinated here: every waiter is told."""
        if self.members or self.pending:
            self.state = ClassicGroupState.DEAD
        for member in self.members.values():
            _fail(member.join_waiter, error)
            _fail(member.sync_waiter, error)

    # -- joining ----------------------------------------------------------------------

    def _check_protocols(self, request: JoinRequest) -> None:
        if self.state == ClassicGroupState.DEAD:
            raise CoordinatorNotAvailableError(f"group {self.group_id!r} is being deleted")
        if not request.protocol_type or not request.protocols:
            raise InconsistentGroupProtocolError(
                f"group {self.group_id!r}: a join must name a protocol type and protocols"
            )
        if not self.members:
            return
        names = {name for name, _ in request.protocols}
        if request.protocol_type != self.protocol_type or not names & self._common_protocols():
            raise InconsistentGroupProtocolError(
                f"group {self.group_id!r} runs {self.protocol_type!r} with protocols "
                f"{sorted(self._common_protocols())}, not {request.protocol_type!r} {sorted(names)}"
            )

    def _join_known(
        self, request: JoinRequest, now_ms: int, timeouts: Timeouts
    ) -> asyncio.Future[JoinAnswer]:
        if request.member_id in self.pending:
            del self.pending[request.member_id]
            return self._add(request.member_id, request, now_ms, timeouts)
        member = self.check_member(request.member_id, request.group_instance_id)
        member.last_seen_ms = now_ms
        unchanged = member.protocols == request.protocols
        if self.state == ClassicGroupState.COMPLETING_REBALANCE and unchanged:
            return _answered(self._answer(member, with_members=member.member_id == self.leader))
        if self.state == ClassicGroupState.STABLE and unchanged and member.member_id != self.leader:
            return _answered(self._answer(member, with_members=False))
        self._update(member, request)
        return self._await_join(member, now_ms)

    def _join_static(
        self, request: JoinRequest, now_ms: int, timeouts: Timeouts
    ) -> asyncio.Future[JoinAnswer]:
        instance_id = request.group_instance_id
        assert instance_id is not None
        new_id = f"{instance_id}-{uuid.uuid4()}"
        old_id = self.static_member(instance_id)
        if old_id is None:
            return self._add(new_id, request, now_ms, timeouts)
        member = self.members.pop(old_id)
        fenced = FencedInstanceIdError(f"instance {instance_id!r} came back as {new_id!r}")
        _fail(member.join_waiter, fenced)
        _fail(member.sync_waiter, fenced)
        member.join_waiter = member.sync_waiter = None
        member.member_id = new_id
        member.last_seen_ms = now_ms
        self.members[new_id] = member
        was_leader = self.leader == old_id
        if was_leader:
            self.leader = new_id
        unchanged = member.protocols == request.protocols
        if self.state == ClassicGroupState.STABLE and unchanged and not was_leader:
            return _answered(self._answer(member, with_members=False))
        self._update(member, request)
        return self._await_join(member, now_ms)

    def _add(
        self, member_id: str, request: JoinRequest, now_ms: int, timeouts: Timeouts
    ) -> asyncio.Future[JoinAnswer]:
        member = ClassicMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocols=request.protocols,
            last_seen_ms=now_ms,
        )
        if not self.members:
            self.protocol_type = request.protocol_type
        self.members[member_id] = member
        if self.state == ClassicGroupState.EMPTY:
            self._start_initial_delay(now_ms, request.rebalance_timeout_ms, timeouts)
        elif self.initial_delay_until_ms is not None:
            self.deadline_ms = min(
                now_ms + timeouts.initial_rebalance_delay_ms, self.initial_delay_until_ms
            )
        return self._await_join(member, now_ms)

    def _update(self, member: ClassicMember, request: JoinRequest) -> None:
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.client_id, member.client_host = request.client_id, request.client_host

    def _await_join(self, member: ClassicMember, now_ms: int) -> asyncio.Future[JoinAnswer]:
        if self.state != ClassicGroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(now_ms)
        _fail(member.join_waiter, RebalanceInProgressError("joined again meanwhile"))
        waiter: asyncio.Future[JoinAnswer] = asyncio.get_running_loop().create_future()
        member.join_waiter = waiter
        self._complete_join_if_ready(now_ms)
        return waiter

    def _start_initial_delay(
        self, now_ms: int, rebalance_timeout_ms: int, timeouts: Timeouts
    ) -> None:
        self.state = ClassicGroupState.PREPARING_REBALANCE
        self.initial_delay_until_ms = now_ms + rebalance_timeout_ms
        self.deadline_ms = min(
            now_ms + timeouts.initial_rebalance_delay_ms, self.initial_delay_until_ms
        )

    def _prepare_rebalance(self, now_ms: int) -> None:
        for member in self.members.values():
            _fail(member.sync_waiter, RebalanceInProgressError("the group rebalances"))
            member.sync_waiter = None
        self.state = ClassicGroupState.PREPARING_REBALANCE
        self.initial_delay_until_ms = None
        timeout_ms = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self.deadline_ms = now_ms + timeout_ms

    def _complete_join_if_ready(self, now_ms: int) -> None:
        if self.state != ClassicGroupState.PREPARING_REBALANCE:
            return
        if self.initial_delay_until_ms is not None or self.pending:
            return  # the initial delay runs to its deadline; pending ids may still join
        if all(m.join_waiter is not None for m in self.members.values()):
            self._complete_join(now_ms)

    def _complete_join(self, now_ms: int) -> None:
        """Members that did not rejoin are dropped, the generation bumped, the answers given."""
        for member in list(self.members.values()):
            if member.join_waiter is None:
                self._drop(member.member_id)
        self.generation += 1
        self.initial_delay_until_ms = None
        if not self.members:
            self.state, self.protocol, self.leader, self.deadline_ms = (
                ClassicGroupState.EMPTY,
                None,
                None,
                None,
            )
            return
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self.protocol = self._choose_protocol()
        self.state = ClassicGroupState.COMPLETING_REBALANCE
        self.deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in self.members.values())
        for member in self.members.values():
            member.last_seen_ms = now_ms
            waiter, member.join_waiter = member.join_waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result(
                    self._answer(member, with_members=member.member_id == self.leader)
                )

    def _answer(self, member: ClassicMember, *, with_members: bool) -> JoinAnswer:
        members = tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol))
            for m in self.members.values()
        )
        assert self.leader is not None
        return JoinAnswer(
            generation=self.generation,
            protocol_type=self.protocol_type or "",
            protocol_name=self.protocol,
            leader=self.leader,
            member_id=member.member_id,
            members=members if with_members else (),
        )

    def _common_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def _choose_protocol(self) -> str:
        """The protocol every member supports that most members list first among those."""
        common = self._common_protocols()
        votes: Counter[str] = Counter()
        for member in self.members.values():
            votes[next(name for name, _ in member.protocols if name in common)] += 1
        return max(votes, key=lambda name: votes[name])

    # -- leaving ----------------------------------------------------------------------

    def _remove(self, member_id: str, now_ms: int) -> None:
        self._drop(member_id)
        if self.state in (ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms)
        if not self.members and self.state == ClassicGroupState.PREPARING_REBALANCE:
            self._complete_join(now_ms)  # nobody to wait for: the group empties now
        else:
            self._complete_join_if_ready(now_ms)

    def _drop(self, member_id: str) -> None:
        member = self.members.pop(member_id)
        gone = UnknownMemberIdError(f"member {member_id!r} left group {self.group_id!r}")
        _fail(member.join_waiter, gone)
        _fail(member.sync_waiter, gone)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)


def _answered(answer: JoinAnswer) -> asyncio.Future[JoinAnswer]:
    waiter: asyncio.Future[JoinAnswer] = asyncio.get_running_loop().create_future()
    waiter.set_result(answer)
    return waiter


def _fail(waiter: asyncio.Future[Any] | None, error: TierlogError) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_exception(error)
        waiter.exception()  # its caller may be gone (a closed connection): no "never retrieved"
