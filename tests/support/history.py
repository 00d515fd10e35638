"""The history of a fault run, as workers in real processes record it, and its checker.

Each worker (a producer, a consumer, the nemesis injecting faults, the final reader)
appends its events to its own JSON-lines file, ``DIR/<worker>.jsonl``, one ``write`` per
line on an ``O_APPEND`` descriptor: a worker killed with ``kill -9`` leaves whole lines,
never a torn one. Times are ``time.monotonic_ns()``: on Linux ``CLOCK_MONOTONIC`` is one
clock for the whole machine, so the files of all processes merge into one order
(``load_history``); ties keep each worker's own order.

The events (every one carries ``worker`` and ``time_ns``):

- ``Invoke(value)``: a produce of ``value`` is about to be sent; values are unique in
  a history, so a value names its produce;
- ``Ok(value, partition, offset)``: the produce was acknowledged (acks=all) there;
- ``Fail(value)``: the produce definitely did not happen (refused before the append);
- ``Info(value)``: indeterminate (a timeout, a lost answer, an error after the append
  such as ``NOT_ENOUGH_REPLICAS_AFTER_APPEND``): it may or may not be stored. An
  ``Invoke`` with no outcome (its worker was killed) is indeterminate too;
- ``Read(partition, offset, value)``: a consumer read ``value`` at that offset;
- ``Commit(group, partition, offset)``: a consumer of ``group`` committed ``offset`` (the
  next one it would read) and the coordinator accepted it;
- ``FinalRead(replica, partition, high_watermark, records)``: after the run, one
  replica's whole log of a partition, as ``(offset, value)`` pairs;
- ``Fault(kind, target)``: the nemesis injected a fault, recorded once it is in
  effect (``availability`` measures from it).

``check(events)`` is a pure function returning every ``Violation`` with the events that
show it. The final log of a partition is the committed part (below its high watermark)
of the final read with the highest high watermark; the rules of issue 18's fault run:

- (a) ``ACKNOWLEDGED_KEPT``: every acknowledged value is in the final log at the offset
  it was acknowledged at;
- (b) ``READS_KEPT``: every read found the final log holding the same value at that
  offset (a read that later vanished exposed lost or uncommitted data);
- (c) ``DUPLICATED``: no value is twice in the final log, whatever its produce's outcome
  (so (e): an indeterminate produce is stored at most once); ``PHANTOM``: no value that
  was never produced is in it;
- (d) ``ACKNOWLEDGED_IN_ORDER``: per producer and partition, acknowledged offsets rise in
  the order the produces were invoked;
- (e) besides ``DUPLICATED``, ``FAILED_ABSENT``: a produce that definitely failed left
  nothing in the final log;
- (f) ``REPLICAS_AGREE``: where two replicas' final reads both lie below their high
  watermarks, they hold the same values at the same offsets (the bytes of their segment
  files are compared by ``tests.support.replica_dirs.compare_replica_dirs``);
- (g) ``COMMITTED_READ``: a group commits an offset only once its members (the workers
  that commit for it) have read every record of the final log below it, and never past
  the final log's high watermark: what a group committed is a gap-free prefix of what
  it read (Kafka's at-least-once promise to a consumer that commits after processing).

A history that cannot be checked (a value produced twice, an outcome with no invoke, a
partition with acknowledged records but no final read) raises ``MalformedHistory``:
that is a bug of the harness, not of the system under test.
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import itertools
import json
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

__all__ = [
    "NULL_VALUE",
    "Commit",
    "Event",
    "Fail",
    "Fault",
    "FinalRead",
    "HistoryRecorder",
    "Info",
    "Invoke",
    "MalformedHistory",
    "Ok",
    "Outage",
    "Read",
    "Rule",
    "Violation",
    "availability",
    "check",
    "load_history",
]

HISTORY_SUFFIX = ".jsonl"
# How a record with a null value is written down: the workers never produce one, so the
# checker reports it as a value nobody produced.
NULL_VALUE = "<null>"


class MalformedHistory(ValueError):
    """The history itself is wrong (unparseable, inconsistent, incomplete)."""


# -- events ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    TYPE: ClassVar[str]
    worker: str
    time_ns: int


@dataclass(frozen=True)
class Invoke(Event):
    TYPE: ClassVar[str] = "invoke"
    value: str


@dataclass(frozen=True)
class Ok(Event):
    TYPE: ClassVar[str] = "ok"
    value: str
    partition: int
    offset: int


@dataclass(frozen=True)
class Fail(Event):
    TYPE: ClassVar[str] = "fail"
    value: str
    reason: str = ""  # the error, for whoever reads the history


@dataclass(frozen=True)
class Info(Event):
    TYPE: ClassVar[str] = "info"
    value: str
    reason: str = ""  # the error, for whoever reads the history


@dataclass(frozen=True)
class Read(Event):
    TYPE: ClassVar[str] = "read"
    partition: int
    offset: int
    value: str


@dataclass(frozen=True)
class Commit(Event):
    TYPE: ClassVar[str] = "commit"
    group: str
    partition: int
    offset: int


@dataclass(frozen=True)
class FinalRead(Event):
    TYPE: ClassVar[str] = "final"
    replica: str
    partition: int
    high_watermark: int
    records: tuple[tuple[int, str], ...]

    def committed(self) -> dict[int, str]:
        """The records below the high watermark, by offset."""
        return {offset: value for offset, value in self.records if offset < self.high_watermark}


@dataclass(frozen=True)
class Fault(Event):
    TYPE: ClassVar[str] = "fault"
    kind: str  # "kill -9", "SIGSTOP", "cut", "blackhole", ...
    target: str  # the broker or link it hit


_EVENT_TYPES: dict[str, type[Event]] = {
    cls.TYPE: cls for cls in (Invoke, Ok, Fail, Info, Read, Commit, FinalRead, Fault)
}


def event_to_json(event: Event) -> str:
    """One line of a history file (no newline)."""
    return json.dumps({"type": event.TYPE, **dataclasses.asdict(event)}, separators=(",", ":"))


def event_from_json(line: str) -> Event:
    """The event a history line holds; MalformedHistory if it holds none."""
    try:
        fields = json.loads(line)
        cls = _EVENT_TYPES[fields.pop("type")]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise MalformedHistory(f"not an event: {line!r}") from error
    expected = {field.name: field.type for field in dataclasses.fields(cls)}
    if fields.keys() != expected.keys():
        raise MalformedHistory(f"a {cls.TYPE} event has fields {sorted(fields)}: {line!r}")
    for name, annotation in expected.items():
        if not _has_type(fields[name], str(annotation)):
            raise MalformedHistory(f"{name} of a {cls.TYPE} event is not {annotation}: {line!r}")
    if cls is FinalRead:
        fields["records"] = tuple((offset, value) for offset, value in fields["records"])
    return cls(**fields)


def _has_type(value: object, annotation: str) -> bool:
    if annotation == "str":
        return isinstance(value, str)
    if annotation == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    # FinalRead.records: [[offset, value], ...]
    return isinstance(value, list) and all(
        isinstance(pair, list)
        and len(pair) == 2
        and _has_type(pair[0], "int")
        and _has_type(pair[1], "str")
        for pair in value
    )


# -- recording and loading ------------------------------------------------------------


class HistoryRecorder:
    """One worker's events, appended to ``DIR/<worker>.jsonl`` as they happen.

    Each event is one ``write`` of one whole line on an ``O_APPEND`` descriptor, with no
    buffer in between: what was recorded before a ``kill -9`` is in the file, whole, and
    threads may share a recorder (a producer's callbacks run on its I/O thread)."""

    def __init__(self, directory: Path, worker: str):
        self.worker = worker
        self.path = directory / f"{worker}{HISTORY_SUFFIX}"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def record(self, event: Event) -> None:
        line = (event_to_json(event) + "\n").encode()
        written = os.write(self._fd, line)
        if written != len(line):  # a full disk: the harness cannot go on honestly
            raise OSError(f"wrote {written} of {len(line)} bytes of an event to {self.path}")

    def _now(self) -> tuple[str, int]:
        return self.worker, time.monotonic_ns()

    def invoke(self, value: str) -> None:
        self.record(Invoke(*self._now(), value))

    def ok(self, value: str, partition: int, offset: int) -> None:
        self.record(Ok(*self._now(), value, partition, offset))

    def fail(self, value: str, reason: str) -> None:
        self.record(Fail(*self._now(), value, reason))

    def info(self, value: str, reason: str) -> None:
        self.record(Info(*self._now(), value, reason))

    def read(self, partition: int, offset: int, value: str) -> None:
        self.record(Read(*self._now(), partition, offset, value))

    def commit(self, group: str, partition: int, offset: int) -> None:
        self.record(Commit(*self._now(), group, partition, offset))

    def final_read(
        self,
        replica: str,
        partition: int,
        high_watermark: int,
        records: Iterable[tuple[int, str]],
    ) -> None:
        self.record(FinalRead(*self._now(), replica, partition, high_watermark, tuple(records)))

    def fault(self, kind: str, target: str) -> None:
        self.record(Fault(*self._now(), kind, target))

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def load_history(directory: Path) -> list[Event]:
    """Every worker's events in ``directory``, merged in time order."""
    events: list[Event] = []
    for path in sorted(directory.glob(f"*{HISTORY_SUFFIX}")):
        text = path.read_text()
        if text and not text.endswith("\n"):
            raise MalformedHistory(f"{path} ends in a torn line: {text.rsplit(chr(10), 1)[-1]!r}")
        events += (event_from_json(line) for line in text.splitlines())
    # Stable: a worker's events with the same time stay in its file's order.
    return sorted(events, key=lambda event: event.time_ns)


# -- the checker ----------------------------------------------------------------------


class Rule(enum.Enum):
    ACKNOWLEDGED_KEPT = "a: an acknowledged record is in the final log where it was acknowledged"
    READS_KEPT = "b: what a consumer read is in the final log at that offset"
    DUPLICATED = "c, e: no value is in the final log twice"
    PHANTOM = "c: no value that was never produced is in the final log"
    ACKNOWLEDGED_IN_ORDER = "d: a producer's acknowledged offsets in a partition rise"
    FAILED_ABSENT = "e: a produce that definitely failed left nothing"
    REPLICAS_AGREE = "f: replicas hold the same records below their high watermarks"
    COMMITTED_READ = "g: a group commits an offset once it has read every record below it"


@dataclass(frozen=True)
class Violation:
    rule: Rule
    message: str
    events: tuple[Event, ...]

    def __str__(self) -> str:
        shown = "\n".join(f"    {event}" for event in self.events)
        return f"{self.rule.name} ({self.rule.value}): {self.message}\n{shown}"


@dataclass(frozen=True)
class _Produce:
    """One value's produce: its invoke and outcome (None: unfinished, indeterminate)."""

    invoke: Invoke
    index: int  # its place among its worker's invokes
    outcome: Ok | Fail | Info | None = None


@dataclass(frozen=True)
class _FinalLog:
    """A partition's final log: the committed records of the most advanced replica."""

    read: FinalRead
    by_offset: Mapping[int, str]


def check(events: Sequence[Event]) -> list[Violation]:
    """Every violation of the rules (module docstring) in a merged history."""
    produces = _produces(events)
    finals = _final_reads(events)
    logs = {partition: _final_log(reads) for partition, reads in finals.items()}
    for produce in produces.values():
        if isinstance(produce.outcome, Ok) and produce.outcome.partition not in logs:
            raise MalformedHistory(
                f"partition {produce.outcome.partition} has acknowledged records but no final read"
            )
    return [
        *_replicas_agree(finals),
        *_acknowledged_kept(produces, logs),
        *_reads_kept(events, logs),
        *_final_log_values(produces, logs),
        *_acknowledged_in_order(produces),
        *_committed_read(events, logs),
    ]


def _produces(events: Iterable[Event]) -> dict[str, _Produce]:
    produces: dict[str, _Produce] = {}
    invokes_per_worker: dict[str, int] = defaultdict(int)
    for event in events:
        if isinstance(event, Invoke):
            if event.value in produces:
                raise MalformedHistory(f"value {event.value!r} produced twice: {event}")
            index = invokes_per_worker[event.worker]
            invokes_per_worker[event.worker] += 1
            produces[event.value] = _Produce(event, index)
        elif isinstance(event, Ok | Fail | Info):
            produce = produces.get(event.value)
            if produce is None or produce.invoke.worker != event.worker:
                raise MalformedHistory(f"an outcome its worker never invoked: {event}")
            if produce.outcome is not None:
                raise MalformedHistory(f"a second outcome: {event} after {produce.outcome}")
            produces[event.value] = dataclasses.replace(produce, outcome=event)
    return produces


def _final_reads(events: Iterable[Event]) -> dict[int, list[FinalRead]]:
    finals: dict[int, list[FinalRead]] = defaultdict(list)
    for event in events:
        if isinstance(event, FinalRead):
            finals[event.partition].append(event)
    return finals


def _final_log(reads: Sequence[FinalRead]) -> _FinalLog:
    best = max(reads, key=lambda read: read.high_watermark)  # the first of equals
    return _FinalLog(best, best.committed())


def _replicas_agree(finals: Mapping[int, Sequence[FinalRead]]) -> Iterator[Violation]:
    for partition, reads in finals.items():
        reference = _final_log(reads).read
        for other in reads:
            if other is reference:
                continue
            upto = min(reference.high_watermark, other.high_watermark)
            theirs, ours = other.committed(), reference.committed()
            differing = sorted(
                offset
                for offset in ours.keys() | theirs.keys()
                if offset < upto and ours.get(offset) != theirs.get(offset)
            )
            if differing:
                offset = differing[0]
                yield Violation(
                    Rule.REPLICAS_AGREE,
                    f"partition {partition} below offset {upto}: {reference.replica} holds "
                    f"{ours.get(offset)!r} at {offset}, {other.replica} "
                    f"{theirs.get(offset)!r} ({len(differing)} offsets differ)",
                    (reference, other),
                )


def _acknowledged_kept(
    produces: Mapping[str, _Produce], logs: Mapping[int, _FinalLog]
) -> Iterator[Violation]:
    where = _where_values_are(logs)
    for value, produce in produces.items():
        ok = produce.outcome
        if not isinstance(ok, Ok):
            continue
        log = logs[ok.partition]
        if log.by_offset.get(ok.offset) == value:
            continue
        found = where.get(value, [])
        elsewhere = f"it is at {found} instead" if found else "it is nowhere"
        yield Violation(
            Rule.ACKNOWLEDGED_KEPT,
            f"{value!r} acknowledged at partition {ok.partition} offset {ok.offset}, which "
            f"holds {log.by_offset.get(ok.offset)!r}; {elsewhere}",
            (produce.invoke, ok, log.read),
        )


def _reads_kept(events: Iterable[Event], logs: Mapping[int, _FinalLog]) -> Iterator[Violation]:
    for event in events:
        if not isinstance(event, Read):
            continue
        log = logs.get(event.partition)
        final = log.by_offset.get(event.offset) if log else None
        if final == event.value:
            continue
        yield Violation(
            Rule.READS_KEPT,
            f"{event.value!r} was read at partition {event.partition} offset {event.offset}, "
            f"where the final log holds {final!r}",
            (event,) if log is None else (event, log.read),
        )


def _final_log_values(
    produces: Mapping[str, _Produce], logs: Mapping[int, _FinalLog]
) -> Iterator[Violation]:
    for value, places in _where_values_are(logs).items():
        finals = tuple(logs[partition].read for partition in sorted({p for p, _ in places}))
        produce = produces.get(value)
        if produce is None:
            yield Violation(Rule.PHANTOM, f"{value!r} at {places} was never produced", finals)
            continue
        involved = (produce.invoke, *_outcome(produce), *finals)
        if len(places) > 1:
            yield Violation(
                Rule.DUPLICATED,
                f"{value!r} ({_outcome_name(produce)}) is in the final log {len(places)} "
                f"times, at {places}",
                involved,
            )
        if isinstance(produce.outcome, Fail):
            yield Violation(Rule.FAILED_ABSENT, f"{value!r} failed but is at {places}", involved)


def _outcome(produce: _Produce) -> tuple[Event, ...]:
    return () if produce.outcome is None else (produce.outcome,)


def _outcome_name(produce: _Produce) -> str:
    return "unfinished" if produce.outcome is None else produce.outcome.TYPE


def _where_values_are(logs: Mapping[int, _FinalLog]) -> dict[str, list[tuple[int, int]]]:
    """Each value of the final logs, with every (partition, offset) holding it."""
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for partition, log in sorted(logs.items()):
        for offset, value in sorted(log.by_offset.items()):
            where[value].append((partition, offset))
    return where


def _acknowledged_in_order(produces: Mapping[str, _Produce]) -> Iterator[Violation]:
    acknowledged: dict[tuple[str, int], list[tuple[int, Ok]]] = defaultdict(list)
    for produce in produces.values():
        if isinstance(produce.outcome, Ok):
            key = (produce.invoke.worker, produce.outcome.partition)
            acknowledged[key].append((produce.index, produce.outcome))
    for (worker, partition), oks in acknowledged.items():
        oks.sort(key=lambda indexed: indexed[0])
        for (_, earlier), (_, later) in itertools.pairwise(oks):
            if later.offset <= earlier.offset:
                yield Violation(
                    Rule.ACKNOWLEDGED_IN_ORDER,
                    f"{worker} produced {earlier.value!r} before {later.value!r} to partition "
                    f"{partition}, acknowledged at {earlier.offset} and {later.offset}",
                    (earlier, later),
                )


def _committed_read(events: Sequence[Event], logs: Mapping[int, _FinalLog]) -> Iterator[Violation]:
    groups_of: dict[str, set[str]] = defaultdict(set)  # worker -> the groups it commits for
    for event in events:
        if isinstance(event, Commit):
            groups_of[event.worker].add(event.group)
    offsets = {partition: sorted(log.by_offset) for partition, log in logs.items()}
    read: dict[tuple[str, int], _ReadPrefix] = {}
    for event in events:
        if isinstance(event, Read):
            for group in groups_of[event.worker]:
                prefix = read.setdefault((group, event.partition), _ReadPrefix())
                prefix.seen.add(event.offset)
        if not isinstance(event, Commit):
            continue
        log = logs.get(event.partition)
        prefix = read.setdefault((event.group, event.partition), _ReadPrefix())
        violation = _commit_violation(event, log, offsets.get(event.partition, []), prefix)
        if violation is not None:
            yield violation


@dataclass
class _ReadPrefix:
    """What a group read of a partition: the offsets, and how many of the final log's
    offsets (in order) it had read all of when last asked; reads only add, so that
    count never falls and each commit costs only what was read since the last."""

    seen: set[int] = dataclasses.field(default_factory=set)
    whole: int = 0

    def whole_prefix(self, offsets: Sequence[int]) -> int:
        while self.whole < len(offsets) and offsets[self.whole] in self.seen:
            self.whole += 1
        return self.whole


def _commit_violation(
    commit: Commit, log: _FinalLog | None, offsets: Sequence[int], prefix: _ReadPrefix
) -> Violation | None:
    """Rule (g) for one commit, given what its group had read of the partition by then
    (``offsets``: the final log's, in order)."""
    high_watermark = log.read.high_watermark if log else 0
    shown = (commit,) if log is None else (commit, log.read)
    where = (
        f"group {commit.group!r} committed offset {commit.offset} of partition {commit.partition}"
    )
    if commit.offset > high_watermark:
        message = f"{where}, past the final log's high watermark {high_watermark}"
        return Violation(Rule.COMMITTED_READ, message, shown)
    below = bisect.bisect_left(offsets, commit.offset)
    if below <= prefix.whole_prefix(offsets):
        return None
    unread = [offset for offset in offsets[:below] if offset not in prefix.seen]
    message = f"{where} before reading offset {unread[0]} ({len(unread)} unread below it)"
    return Violation(Rule.COMMITTED_READ, message, shown)


# -- availability ---------------------------------------------------------------------


@dataclass(frozen=True)
class Outage:
    """A fault and the first acknowledgement of a produce invoked after it (None: there
    was none). An answer already on its way when the fault struck would say nothing of
    recovery, so it does not count."""

    fault: Fault
    next_ok: Ok | None

    @property
    def seconds(self) -> float | None:
        """From the fault to that acknowledgement."""
        if self.next_ok is None:
            return None
        return (self.next_ok.time_ns - self.fault.time_ns) / 1e9


def availability(events: Sequence[Event]) -> list[Outage]:
    """For each fault, in order, how long until a produce sent after it was acknowledged."""
    invoked_ns = {event.value: event.time_ns for event in events if isinstance(event, Invoke)}
    oks = [event for event in events if isinstance(event, Ok)]
    return [
        Outage(fault, next((ok for ok in oks if invoked_ns[ok.value] > fault.time_ns), None))
        for fault in events
        if isinstance(fault, Fault)
    ]
