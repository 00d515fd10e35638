"""Kafka's own ``VerifiableProducer`` and ``VerifiableConsumer`` (``org.apache.kafka.tools``)
as workers of a fault run: the JSON events they print on stdout, one per line, read
back as ``tests.support.history`` events for its checker.

The producer sends the values ``0``, ``1``, ... ``max_messages - 1`` in that order (keys,
if any, only choose the partition) and prints a line per outcome:
``producer_send_success`` with the partition and offset acknowledged (``Ok``; with no
offset, ``Info``), or ``producer_send_error`` (``Info``: the tool prints a send refused
before it left and one that failed after it was sent alike, and the second may be
stored). It prints nothing before a send, so every value counts as invoked, in order,
when the tool says it started (``startup_complete``); a value with no outcome is
indeterminate, as a killed worker's is.

The consumer with ``--verbose`` prints ``record_data`` for each record it is given
(``Read``) and, with auto-commit off, ``offsets_committed`` after each poll's
synchronous commit of the offsets after what that poll returned: each partition of a
successful one is a ``Commit`` of its group (the output does not name the group, so the
caller does). A failed commit changed nothing and is left out.

The tools stamp each event with the wall clock in milliseconds; those become the
monotonic nanoseconds of the history (the two clocks' distance is measured once), kept
from decreasing within one tool's output so that its own order holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.history import (
    NULL_VALUE,
    Commit,
    Event,
    Info,
    Invoke,
    MalformedHistory,
    Ok,
    Read,
)

__all__ = [
    "ToolEvent",
    "committed_offsets",
    "consumer_history",
    "named",
    "producer_history",
    "tool_events",
]

ToolEvent = Mapping[str, Any]

PRODUCER_EVENTS = frozenset(
    {"startup_complete", "producer_send_success", "producer_send_error", "shutdown_complete",
     "tool_data"}
)  # fmt: skip
CONSUMER_EVENTS = frozenset(
    {"startup_complete", "partitions_assigned", "partitions_revoked", "records_consumed",
     "record_data", "offsets_committed", "shutdown_complete"}
)  # fmt: skip


def tool_events(path: Path) -> list[ToolEvent]:
    """The events a tool has printed to ``path`` so far (whole lines only: it may be
    writing one)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    events: list[ToolEvent] = []
    for line in lines:
        if not line.endswith("\n"):
            break
        try:
            event = json.loads(line)
        except ValueError as error:
            raise MalformedHistory(f"{path}: not a JSON event: {line!r}") from error
        if not isinstance(event, dict) or not isinstance(event.get("name"), str):
            raise MalformedHistory(f"{path}: an event without a name: {line!r}")
        events.append(event)
    return events


def named(events: Sequence[ToolEvent], name: str) -> list[ToolEvent]:
    return [event for event in events if event["name"] == name]


def committed_offsets(events: Sequence[ToolEvent]) -> dict[int, int]:
    """Each partition's offset as the consumer's last successful commit left it."""
    offsets: dict[int, int] = {}
    for event in named(events, "offsets_committed"):
        if event["success"]:
            offsets |= {entry["partition"]: entry["offset"] for entry in event["offsets"]}
    return offsets


def producer_history(
    events: Sequence[ToolEvent], worker: str, topic: str, max_messages: int
) -> list[Event]:
    """A ``VerifiableProducer --max-messages max_messages`` run's history."""
    timed = list(_timed(events, worker, topic, PRODUCER_EVENTS))
    if not timed or timed[0][1]["name"] != "startup_complete":
        raise MalformedHistory(f"{worker} printed no startup_complete first")
    started_ns = timed[0][0]
    history: list[Event] = [Invoke(worker, started_ns, str(n)) for n in range(max_messages)]
    for at_ns, event in timed:
        try:
            if event["name"] == "producer_send_success" and event["offset"] >= 0:
                history.append(
                    Ok(worker, at_ns, event["value"], event["partition"], event["offset"])
                )
            elif event["name"] == "producer_send_success":
                history.append(
                    Info(worker, at_ns, event["value"], "acknowledged without an offset")
                )
            elif event["name"] == "producer_send_error":
                reason = f"{event['exception']}: {event['message']}"
                history.append(Info(worker, at_ns, event["value"], reason))
        except KeyError as error:
            raise MalformedHistory(f"{worker}: {event} has no {error}") from None
    return history


def consumer_history(
    events: Sequence[ToolEvent], worker: str, topic: str, group: str
) -> list[Event]:
    """A ``VerifiableConsumer --verbose`` (auto-commit off) run's history in ``group``."""
    history: list[Event] = []
    for at_ns, event in _timed(events, worker, topic, CONSUMER_EVENTS):
        try:
            if event["name"] == "record_data":
                value = NULL_VALUE if event["value"] is None else event["value"]
                history.append(Read(worker, at_ns, event["partition"], event["offset"], value))
            elif event["name"] == "offsets_committed" and event["success"]:
                for entry in event["offsets"]:
                    _check_topic(entry, worker, topic)
                    history.append(
                        Commit(worker, at_ns, group, entry["partition"], entry["offset"])
                    )
        except KeyError as error:
            raise MalformedHistory(f"{worker}: {event} has no {error}") from None
    return history


def _timed(
    events: Sequence[ToolEvent], worker: str, topic: str, known: frozenset[str]
) -> Iterator[tuple[int, ToolEvent]]:
    """Each event with its time on the history's clock, after checking it is one the
    tool prints, about ``topic``."""
    wall_minus_monotonic_ns = time.time_ns() - time.monotonic_ns()
    latest_ns = 0
    for event in events:
        if event["name"] not in known:
            raise MalformedHistory(f"{worker} printed an event it does not print: {event}")
        _check_topic(event, worker, topic)
        if not isinstance(event.get("timestamp"), int):
            raise MalformedHistory(f"{worker}: {event} has no timestamp")
        latest_ns = max(latest_ns, event["timestamp"] * 1_000_000 - wall_minus_monotonic_ns)
        yield latest_ns, event


def _check_topic(event: ToolEvent, worker: str, topic: str) -> None:
    if "topic" in event and event["topic"] != topic:
        raise MalformedHistory(f"{worker}: {event} is about another topic than {topic!r}")
