"""Kafka's Verifiable tools' output read as a history: written here line for line in the
tools' own format (Kafka 4.1.1's VerifiableProducer and VerifiableConsumer), a run where
everything holds passes the checker, and the same run doctored to lose one
acknowledged record, or to skip one in the consumer, is caught."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.history import (
    Commit,
    Event,
    FinalRead,
    Info,
    Invoke,
    MalformedHistory,
    Ok,
    Read,
    Rule,
    check,
)
from tests.support.verifiable_tools import (
    committed_offsets,
    consumer_history,
    producer_history,
    tool_events,
)

TOPIC, GROUP = "verifiable", "verifiers"
T0 = 1_764_000_000_000  # a wall-clock millisecond


def printed(tmp_path: Path, name: str, *events: dict[str, Any]) -> Path:
    """A tool's stdout: one JSON object a line, as Jackson writes them."""
    path = tmp_path / f"{name}.out"
    path.write_text("".join(json.dumps(event, separators=(",", ":")) + "\n" for event in events))
    return path


def event(name: str, at: int, **fields: Any) -> dict[str, Any]:
    return {"timestamp": T0 + at, "name": name, **fields}


def sent(at: int, value: str, partition: int, offset: int) -> dict[str, Any]:
    return event("producer_send_success", at, key=None, value=value, topic=TOPIC,
                 partition=partition, offset=offset)  # fmt: skip


def record(at: int, value: str, partition: int, offset: int) -> dict[str, Any]:
    return event("record_data", at, key=None, value=value, topic=TOPIC,
                 partition=partition, offset=offset)  # fmt: skip


def committed(at: int, **offsets: int) -> dict[str, Any]:
    """``p0=3``: partition 0 committed at offset 3."""
    entries = [{"topic": TOPIC, "partition": int(p[1:]), "offset": o} for p, o in offsets.items()]
    return event("offsets_committed", at, offsets=entries, success=True)


PRODUCER = (
    event("startup_complete", 0),
    sent(5, "0", 0, 0),
    sent(5, "1", 1, 0),
    event("producer_send_error", 6, key=None, value="2", topic=TOPIC,
          exception="class org.apache.kafka.common.errors.TimeoutException", message="expired"),
    sent(9, "3", 0, 1),
    event("shutdown_complete", 10),
    event("tool_data", 10, sent=4, acked=3, target_throughput=-1, avg_throughput=300.0),
)  # fmt: skip
CONSUMER = (
    event("startup_complete", 0),
    event("partitions_assigned", 2, partitions=[{"topic": TOPIC, "partition": 0},
                                                {"topic": TOPIC, "partition": 1}]),
    record(6, "0", 0, 0),
    record(6, "1", 1, 0),
    event("records_consumed", 6, count=2, partitions=[
        {"topic": TOPIC, "partition": 0, "count": 1, "minOffset": 0, "maxOffset": 0},
        {"topic": TOPIC, "partition": 1, "count": 1, "minOffset": 0, "maxOffset": 0}]),
    committed(6, p0=1, p1=1),
    record(9, "3", 0, 1),
    committed(9, p0=2),
    event("offsets_committed", 11, offsets=[{"topic": TOPIC, "partition": 0, "offset": 9}],
          error="the coordinator moved", success=False),
    event("partitions_revoked", 12, partitions=[]),
    event("shutdown_complete", 12),
)  # fmt: skip


def history(
    tmp_path: Path,
    producer: tuple[dict[str, Any], ...] = PRODUCER,
    consumer: tuple[dict[str, Any], ...] = CONSUMER,
    final: dict[int, list[str]] | None = None,
) -> list[Event]:
    """The tools' runs and, after them, a read of each partition whole (``final``)."""
    events = producer_history(tool_events(printed(tmp_path, "p", *producer)), "p", TOPIC, 4)
    events += consumer_history(tool_events(printed(tmp_path, "c", *consumer)), "c", TOPIC, GROUP)
    at_end = max(event.time_ns for event in events) + 1
    for partition, values in (final or {0: ["0", "3"], 1: ["1"]}).items():
        events.append(
            FinalRead("reader", at_end, "tierlog-client", partition, len(values),
                      tuple(enumerate(values)))
        )  # fmt: skip
    return sorted(events, key=lambda event: event.time_ns)


def rules(events: list[Event]) -> list[Rule]:
    return [violation.rule for violation in check(events)]


def test_the_tools_events_become_the_history_they_describe(tmp_path: Path) -> None:
    events = history(tmp_path)
    produced = [e for e in events if e.worker == "p"]
    assert [e.value for e in produced if isinstance(e, Invoke)] == ["0", "1", "2", "3"]
    assert [(e.value, e.partition, e.offset) for e in produced if isinstance(e, Ok)] == [
        ("0", 0, 0),
        ("1", 1, 0),
        ("3", 0, 1),
    ]
    [info] = [e for e in produced if isinstance(e, Info)]
    assert (info.value, info.reason) == ("2", "class org.apache.kafka.common."
                                              "errors.TimeoutException: expired")  # fmt: skip
    consumed = [e for e in events if e.worker == "c"]
    assert [(e.partition, e.offset, e.value) for e in consumed if isinstance(e, Read)] == [
        (0, 0, "0"),
        (1, 0, "1"),
        (0, 1, "3"),
    ]
    assert [(e.group, e.partition, e.offset) for e in consumed if isinstance(e, Commit)] == [
        (GROUP, 0, 1),
        (GROUP, 1, 1),
        (GROUP, 0, 2),
    ]  # the failed commit is left out
    assert committed_offsets(tool_events(printed(tmp_path, "c", *CONSUMER))) == {0: 2, 1: 1}
    assert check(events) == []


def test_the_tools_own_order_holds_when_the_wall_clock_steps_back(tmp_path: Path) -> None:
    consumer = (event("startup_complete", 5), record(3, "0", 0, 0), committed(1, p0=1))
    events = consumer_history(tool_events(printed(tmp_path, "c", *consumer)), "c", TOPIC, GROUP)
    assert [type(e) for e in sorted(events, key=lambda e: e.time_ns)] == [Read, Commit]


def test_an_indeterminate_send_may_be_stored(tmp_path: Path) -> None:
    assert check(history(tmp_path, final={0: ["0", "3"], 1: ["1", "2"]})) == []


def test_a_lost_acknowledged_record_is_caught(tmp_path: Path) -> None:
    """The doctored run: value 3, acknowledged at partition 0 offset 1, read and
    committed by the consumer, is not in the topic afterwards."""
    assert rules(history(tmp_path, final={0: ["0"], 1: ["1"]})) == [
        Rule.ACKNOWLEDGED_KEPT,
        Rule.READS_KEPT,
        Rule.COMMITTED_READ,
    ]


def test_an_offset_holding_another_value_is_caught(tmp_path: Path) -> None:
    assert Rule.ACKNOWLEDGED_KEPT in rules(history(tmp_path, final={0: ["3", "0"], 1: ["1"]}))


def test_a_record_the_consumer_skipped_before_committing_is_caught(tmp_path: Path) -> None:
    """The consumer was never given offset 0 of partition 0, and committed past it."""
    skipping = tuple(e for e in CONSUMER if not (e["name"] == "record_data" and e["value"] == "0"))
    assert rules(history(tmp_path, consumer=skipping)) == [Rule.COMMITTED_READ] * 2


@pytest.mark.parametrize(
    ("producer", "error"),
    [
        ((sent(5, "0", 0, 0),), "no startup_complete"),
        ((event("startup_complete", 0), event("producer_send_retry", 1)), "does not print"),
        ((event("startup_complete", 0), {**sent(5, "0", 0, 0), "topic": "other"}), "another"),
        (
            (event("startup_complete", 0), event("producer_send_success", 5, value="0")),
            "no 'offset'",
        ),
    ],
    ids=["no-startup", "unknown-event", "another-topic", "missing-field"],
)
def test_output_the_tools_do_not_print_is_a_malformed_history(
    tmp_path: Path, producer: tuple[dict[str, Any], ...], error: str
) -> None:
    with pytest.raises(MalformedHistory, match=error):
        producer_history(tool_events(printed(tmp_path, "p", *producer)), "p", TOPIC, 1)


def test_a_line_still_being_written_is_not_read_yet(tmp_path: Path) -> None:
    path = printed(tmp_path, "c", *CONSUMER[:2])
    with path.open("a") as out:
        out.write('{"timestamp":1,"name":"record_da')
    assert [e["name"] for e in tool_events(path)] == ["startup_complete", "partitions_assigned"]
    path.write_text(path.read_text() + "garbage\n")
    with pytest.raises(MalformedHistory, match="not a JSON event"):
        tool_events(path)
