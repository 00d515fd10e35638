"""The fault run's history checker: hand-made histories that break each rule are caught,
valid ones pass, and a random valid history passes while one mutation of it does not.
Recording goes through real files, and a worker killed mid-run leaves whole lines."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.history import (
    Commit,
    Event,
    Fail,
    Fault,
    FinalRead,
    HistoryRecorder,
    Info,
    Invoke,
    MalformedHistory,
    Ok,
    Read,
    Rule,
    Violation,
    availability,
    check,
    load_history,
)
from tests.support.process_faults import kill_9

REPO = Path(__file__).resolve().parents[2]


class History:
    """Events written by hand, each one nanosecond after the one before."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def _at(self) -> int:
        return len(self.events)

    def invoke(self, worker: str, value: str) -> History:
        self.events.append(Invoke(worker, self._at(), value))
        return self

    def ok(self, worker: str, value: str, partition: int, offset: int) -> History:
        self.events.append(Ok(worker, self._at(), value, partition, offset))
        return self

    def produced(self, worker: str, value: str, partition: int, offset: int) -> History:
        return self.invoke(worker, value).ok(worker, value, partition, offset)

    def fail(self, worker: str, value: str) -> History:
        self.events.append(Fail(worker, self._at(), value))
        return self

    def info(self, worker: str, value: str) -> History:
        self.events.append(Info(worker, self._at(), value))
        return self

    def read(self, partition: int, offset: int, value: str, worker: str = "consumer") -> History:
        self.events.append(Read(worker, self._at(), partition, offset, value))
        return self

    def commit(self, group: str, partition: int, offset: int, worker: str = "consumer") -> History:
        self.events.append(Commit(worker, self._at(), group, partition, offset))
        return self

    def final(
        self,
        partition: int,
        values: list[str],
        *,
        replica: str = "broker-0",
        high_watermark: int | None = None,
    ) -> History:
        """A replica's final read: ``values`` at offsets 0, 1, ... (None of them skipped)."""
        records = tuple(enumerate(values))
        hw = len(values) if high_watermark is None else high_watermark
        self.events.append(FinalRead("final", self._at(), replica, partition, hw, records))
        return self

    def fault(self, kind: str, target: str) -> History:
        self.events.append(Fault("nemesis", self._at(), kind, target))
        return self


def rules(violations: list[Violation]) -> list[Rule]:
    return [violation.rule for violation in violations]


# -- valid histories ------------------------------------------------------------------


def test_a_history_where_everything_holds_passes() -> None:
    history = (
        History()
        .produced("p1", "a", 0, 0)
        .produced("p2", "b", 0, 1)
        .invoke("p1", "c")
        .read(0, 0, "a")
        .ok("p1", "c", 1, 0)
        .read(1, 0, "c")
        .final(0, ["a", "b"])
        .final(1, ["c"])
    )
    assert check(history.events) == []


def test_indeterminate_and_unfinished_produces_may_be_present_or_absent() -> None:
    history = (
        History()
        .invoke("p1", "stored-info")
        .info("p1", "stored-info")
        .invoke("p1", "lost-info")
        .info("p1", "lost-info")
        .invoke("p2", "stored-unfinished")  # p2 was killed before it heard back
        .invoke("p3", "lost-unfinished")
        .invoke("p1", "failed")
        .fail("p1", "failed")
        .final(0, ["stored-info", "stored-unfinished"])
    )
    assert check(history.events) == []


def test_a_lagging_replica_agrees_below_its_high_watermark() -> None:
    """A follower behind the leader, or holding uncommitted records past its high
    watermark that the leader truncated, agrees with it where both are committed."""
    history = (
        History()
        .produced("p1", "a", 0, 0)
        .produced("p1", "b", 0, 1)
        .invoke("p1", "c")
        .final(0, ["a", "b"], replica="broker-0")
        .final(0, ["a", "c"], replica="broker-1", high_watermark=1)
        .final(0, ["a"], replica="broker-2")
    )
    assert check(history.events) == []


def test_the_final_log_is_the_committed_part_of_the_most_advanced_replica() -> None:
    """A record past the high watermark is not in the final log: a read of it exposed
    uncommitted data, even if a replica still holds it."""
    history = (
        History()
        .produced("p1", "a", 0, 0)
        .invoke("p1", "uncommitted")
        .read(0, 1, "uncommitted")
        .final(0, ["a", "uncommitted"], high_watermark=1)
    )
    assert rules(check(history.events)) == [Rule.READS_KEPT]


# -- one rule broken at a time ---------------------------------------------------------


def test_a_lost_acknowledged_record_is_caught() -> None:
    history = History().produced("p1", "a", 0, 0).produced("p1", "b", 0, 1).final(0, ["a"])
    [violation] = check(history.events)
    assert violation.rule is Rule.ACKNOWLEDGED_KEPT
    assert "'b' acknowledged at partition 0 offset 1" in violation.message
    assert "it is nowhere" in violation.message
    assert [type(event) for event in violation.events] == [Invoke, Ok, FinalRead]


def test_an_acknowledged_record_at_another_offset_is_caught() -> None:
    history = (
        History()
        .invoke("p1", "x")
        .info("p1", "x")
        .produced("p1", "a", 0, 0)  # acknowledged at 0, stored at 1
        .final(0, ["x", "a"])
    )
    [violation] = check(history.events)
    assert violation.rule is Rule.ACKNOWLEDGED_KEPT
    assert "holds 'x'; it is at [(0, 1)] instead" in violation.message


def test_an_acknowledged_record_in_another_partition_is_caught() -> None:
    history = History().produced("p1", "a", 0, 0).final(0, []).final(1, ["a"])
    assert rules(check(history.events)) == [Rule.ACKNOWLEDGED_KEPT]


def test_a_read_of_a_record_that_vanished_is_caught() -> None:
    """The consumer saw "b" at offset 1; the final log has nothing there."""
    history = (
        History()
        .produced("p1", "a", 0, 0)
        .invoke("p1", "b")
        .info("p1", "b")
        .read(0, 1, "b")
        .final(0, ["a"])
    )
    [violation] = check(history.events)
    assert violation.rule is Rule.READS_KEPT
    assert "'b' was read at partition 0 offset 1, where the final log holds None" in str(violation)


def test_a_read_of_a_record_replaced_by_another_is_caught() -> None:
    history = (
        History()
        .invoke("p1", "b")
        .info("p1", "b")
        .read(0, 0, "b")
        .produced("p2", "c", 0, 0)
        .final(0, ["c"])
    )
    assert rules(check(history.events)) == [Rule.READS_KEPT]


def test_a_read_of_a_partition_never_read_at_the_end_is_caught() -> None:
    history = History().invoke("p1", "a").info("p1", "a").read(3, 0, "a").final(0, [])
    assert rules(check(history.events)) == [Rule.READS_KEPT]


def test_an_acknowledged_record_stored_twice_is_caught() -> None:
    history = History().produced("p1", "a", 0, 0).final(0, ["a", "a"])
    [violation] = check(history.events)
    assert violation.rule is Rule.DUPLICATED
    assert "'a' (ok) is in the final log 2 times, at [(0, 0), (0, 1)]" in violation.message


def test_an_indeterminate_record_stored_twice_is_caught() -> None:
    history = History().invoke("p1", "a").info("p1", "a").final(0, ["a"]).final(1, ["a"])
    [violation] = check(history.events)
    assert violation.rule is Rule.DUPLICATED
    assert "(info)" in violation.message


def test_an_unfinished_record_stored_twice_is_caught() -> None:
    history = History().invoke("p1", "a").final(0, ["a", "a"])
    assert rules(check(history.events)) == [Rule.DUPLICATED]


def test_a_record_never_produced_is_caught() -> None:
    history = History().produced("p1", "a", 0, 0).final(0, ["a", "ghost"])
    [violation] = check(history.events)
    assert violation.rule is Rule.PHANTOM
    assert "'ghost' at [(0, 1)] was never produced" in violation.message


def test_a_failed_produce_that_was_stored_is_caught() -> None:
    history = History().invoke("p1", "a").fail("p1", "a").final(0, ["a"])
    [violation] = check(history.events)
    assert violation.rule is Rule.FAILED_ABSENT
    assert [type(event) for event in violation.events] == [Invoke, Fail, FinalRead]


def test_acknowledged_offsets_falling_in_produce_order_are_caught() -> None:
    """p1 sent "a" then "b" to partition 0 (both in flight); the broker stored and
    acknowledged them the other way round."""
    history = (
        History()
        .invoke("p1", "a")
        .invoke("p1", "b")
        .ok("p1", "b", 0, 0)
        .ok("p1", "a", 0, 1)
        .final(0, ["b", "a"])
    )
    [violation] = check(history.events)
    assert violation.rule is Rule.ACKNOWLEDGED_IN_ORDER
    assert "p1 produced 'a' before 'b' to partition 0, acknowledged at 1 and 0" in str(violation)


def test_acknowledged_offsets_of_different_producers_or_partitions_need_not_rise() -> None:
    history = (
        History()
        .invoke("p1", "a")
        .invoke("p2", "b")
        .invoke("p1", "c")
        .ok("p2", "b", 0, 0)
        .ok("p1", "a", 0, 1)
        .ok("p1", "c", 1, 0)
        .final(0, ["b", "a"])
        .final(1, ["c"])
    )
    assert check(history.events) == []


def test_replicas_holding_different_records_below_their_high_watermarks_are_caught() -> None:
    history = (
        History()
        .produced("p1", "a", 0, 0)
        .invoke("p1", "b")
        .invoke("p2", "c")
        .final(0, ["a", "b"], replica="broker-0")
        .final(0, ["a", "c"], replica="broker-1")
    )
    [violation] = check(history.events)
    assert violation.rule is Rule.REPLICAS_AGREE
    assert "broker-0 holds 'b' at 1, broker-1 'c'" in violation.message


def test_a_replica_missing_a_committed_record_is_caught() -> None:
    history = (
        History()
        .produced("p1", "a", 0, 0)
        .produced("p1", "b", 0, 1)
        .final(0, ["a", "b"], replica="broker-0")
        .final(0, ["a"], replica="broker-1", high_watermark=2)
    )
    assert rules(check(history.events)) == [Rule.REPLICAS_AGREE]


def test_a_group_that_committed_what_its_members_read_passes() -> None:
    """Members take turns (a rebalance): each commits what it read, a record read twice
    (after a commit that failed) is fine, and a commit may stop short of what was read."""
    history = (
        History()
        .produced("p1", "a", 0, 0)
        .produced("p1", "b", 0, 1)
        .produced("p1", "c", 0, 2)
        .read(0, 0, "a", worker="c1")
        .read(0, 1, "b", worker="c1")
        .commit("g", 0, 1, worker="c1")
        .commit("g", 0, 2, worker="c1")
        .read(0, 1, "b", worker="c2")
        .read(0, 2, "c", worker="c2")
        .commit("g", 0, 3, worker="c2")
        .commit("g", 1, 0, worker="c2")  # nothing read there, nothing committed
        .final(0, ["a", "b", "c"])
    )
    assert check(history.events) == []


def test_a_commit_past_a_record_the_group_never_read_is_caught() -> None:
    """The consumer skipped offset 1 (a lost fetch answer) and committed past it."""
    history = (
        History()
        .produced("p1", "a", 0, 0)
        .produced("p1", "b", 0, 1)
        .produced("p1", "c", 0, 2)
        .read(0, 0, "a")
        .read(0, 2, "c")
        .commit("g", 0, 3)
        .final(0, ["a", "b", "c"])
    )
    [violation] = check(history.events)
    assert violation.rule is Rule.COMMITTED_READ
    assert "group 'g' committed offset 3 of partition 0 before reading offset 1 (1 unread" in str(
        violation
    )
    assert [type(event) for event in violation.events] == [Commit, FinalRead]


@pytest.mark.parametrize(
    "history",
    [
        History().produced("p1", "a", 0, 0).commit("g", 0, 1).read(0, 0, "a").final(0, ["a"]),
        History()
        .produced("p1", "a", 0, 0)
        .read(0, 0, "a", worker="other-group")
        .commit("other", 0, 1, worker="other-group")
        .commit("g", 0, 1)
        .final(0, ["a"]),
        History()
        .produced("p1", "a", 0, 0)
        .produced("p1", "b", 1, 0)
        .read(1, 0, "b")
        .commit("g", 0, 1)
        .final(0, ["a"])
        .final(1, ["b"]),
    ],
    ids=["read-after-the-commit", "read-by-another-group", "another-partition"],
)
def test_a_read_counts_only_before_the_commit_in_its_group_and_partition(
    history: History,
) -> None:
    assert Rule.COMMITTED_READ in rules(check(history.events))


def test_a_commit_past_the_final_logs_high_watermark_is_caught() -> None:
    """Records read and committed, then lost: the commit points past the log's end."""
    history = (
        History()
        .produced("p1", "a", 0, 0)
        .invoke("p1", "b")
        .info("p1", "b")
        .read(0, 0, "a")
        .read(0, 1, "b")
        .commit("g", 0, 2)
        .final(0, ["a"])
    )
    violations = check(history.events)
    assert rules(violations) == [Rule.READS_KEPT, Rule.COMMITTED_READ]
    assert "past the final log's high watermark 1" in violations[1].message


# -- histories that cannot be checked ------------------------------------------------------


def test_a_value_produced_twice_is_a_malformed_history() -> None:
    with pytest.raises(MalformedHistory, match="produced twice"):
        check(History().invoke("p1", "a").invoke("p2", "a").events)


@pytest.mark.parametrize(
    "history",
    [
        History().ok("p1", "a", 0, 0),
        History().invoke("p1", "a").info("p2", "a"),
        History().invoke("p1", "a").info("p1", "a").ok("p1", "a", 0, 0),
    ],
    ids=["never-invoked", "another-worker", "two-outcomes"],
)
def test_an_outcome_without_its_one_invoke_is_a_malformed_history(history: History) -> None:
    with pytest.raises(MalformedHistory):
        check(history.events)


def test_acknowledged_records_without_a_final_read_are_a_malformed_history() -> None:
    with pytest.raises(MalformedHistory, match="partition 1 has acknowledged records"):
        check(History().produced("p1", "a", 1, 0).final(0, []).events)


# -- availability -----------------------------------------------------------------------


def test_availability_is_the_time_from_each_fault_to_the_next_acknowledged_new_produce() -> None:
    history = (
        History()
        .produced("p1", "a", 0, 0)
        .invoke("p2", "in-flight")
        .fault("kill -9", "broker-1")  # at 3
        .ok("p2", "in-flight", 0, 1)  # answered already on its way: not a recovery
        .invoke("p1", "b")
        .info("p1", "b")
        .produced("p1", "c", 0, 2)  # ok at 8
        .fault("cut", "broker-2")  # at 9, never followed by an ok
        .invoke("p1", "d")
    )
    first, second = availability(history.events)
    assert (first.fault.target, first.next_ok, first.seconds) == (
        "broker-1",
        history.events[8],
        5e-9,
    )
    assert (second.fault.kind, second.next_ok, second.seconds) == ("cut", None, None)


# -- recording in real files ----------------------------------------------------------------


def test_recorded_events_load_back_merged_in_time_order(tmp_path: Path) -> None:
    with (
        HistoryRecorder(tmp_path, "producer-1") as producer,
        HistoryRecorder(tmp_path, "consumer-1") as consumer,
        HistoryRecorder(tmp_path, "final") as final,
    ):
        producer.invoke("a")
        producer.ok("a", 0, 0)
        consumer.read(0, 0, "a")
        consumer.commit("group-1", 0, 1)
        producer.invoke("b")
        producer.info("b", "REQUEST_TIMED_OUT")
        producer.invoke("c")
        producer.fail("c", "RECORD_TOO_LARGE")
        final.final_read("broker-0", 0, 1, [(0, "a")])
    events = load_history(tmp_path)
    assert [(event.worker, event.TYPE) for event in events] == [
        ("producer-1", "invoke"),
        ("producer-1", "ok"),
        ("consumer-1", "read"),
        ("consumer-1", "commit"),
        ("producer-1", "invoke"),
        ("producer-1", "info"),
        ("producer-1", "invoke"),
        ("producer-1", "fail"),
        ("final", "final"),
    ]
    final_read = events[-1]
    assert isinstance(final_read, FinalRead)
    assert final_read == FinalRead("final", final_read.time_ns, "broker-0", 0, 1, ((0, "a"),))
    times = [event.time_ns for event in events]
    assert times == sorted(times)
    assert check(events) == []


def test_a_worker_killed_mid_run_leaves_only_whole_lines(tmp_path: Path) -> None:
    """kill -9 while a worker records as fast as it can: every line loads."""
    worker = subprocess.Popen(
        [sys.executable, "-c",
         "import sys\n"
         "from pathlib import Path\n"
         "from tests.support.history import HistoryRecorder\n"
         "recorder = HistoryRecorder(Path(sys.argv[1]), 'producer-1')\n"
         "i = 0\n"
         "while True:\n"
         "    recorder.invoke(f'value-{i}-' + 'x' * (i % 500))\n"
         "    i += 1\n",
         str(tmp_path)],
        cwd=REPO,
    )  # fmt: skip
    path = tmp_path / "producer-1.jsonl"
    try:
        while not path.exists() or path.stat().st_size < 200_000:
            assert worker.poll() is None, "the worker died on its own"
    finally:
        kill_9(worker.pid)
        worker.wait()
    events = load_history(tmp_path)
    assert len(events) > 100
    assert [event.value for event in events if isinstance(event, Invoke)] == [
        f"value-{i}-" + "x" * (i % 500) for i in range(len(events))
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"type":"invoke","worker":"p1","time_ns":1,"value":"a"}', "torn line"),
        ('{"type":"invoke","worker":"p1","time_ns":1}\n', "has fields"),
        ('{"type":"invoke","worker":"p1","time_ns":"1","value":"a"}\n', "time_ns .* not int"),
        ('{"type":"launch","worker":"p1","time_ns":1}\n', "not an event"),
        ("not json\n", "not an event"),
        (
            '{"type":"final","worker":"f","time_ns":1,"replica":"b","partition":0,'
            '"high_watermark":1,"records":[[0]]}\n',
            "records .* not",
        ),
    ],
    ids=["torn", "missing-field", "wrong-type", "unknown-type", "not-json", "bad-records"],
)
def test_a_damaged_history_file_is_refused(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "p1.jsonl").write_text(text)
    with pytest.raises(MalformedHistory, match=error):
        load_history(tmp_path)


# -- random histories -----------------------------------------------------------------------

OUTCOMES = ("ok", "fail", "info", "unfinished")


@st.composite
def valid_histories(draw: st.DrawFn) -> History:
    """Producers' produces with every outcome, served by a correct broker: acknowledged
    records stored where acknowledged, indeterminate ones stored or not, failed ones
    not; consumers read stored records and commit what they read without a gap;
    replicas hold prefixes of the log."""
    partitions = draw(st.integers(1, 3))
    produces = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["p1", "p2", "p3"]),
                st.integers(0, partitions - 1),
                st.sampled_from(OUTCOMES),
                st.booleans(),  # whether an indeterminate produce was stored
            ),
            min_size=1,
            max_size=40,
        )
    )
    produces[0] = (produces[0][0], produces[0][1], "ok", True)  # one acknowledged at least
    history = History()
    logs: list[list[str]] = [[] for _ in range(partitions)]
    read: list[set[int]] = [set() for _ in range(partitions)]  # offsets the consumer read
    for i, (worker, partition, outcome, stored) in enumerate(produces):
        value = f"{worker}-{i}"
        history.invoke(worker, value)
        if outcome == "fail" or (outcome in ("info", "unfinished") and not stored):
            if outcome != "unfinished":
                getattr(history, outcome)(worker, value)
            continue
        logs[partition].append(value)
        offset = len(logs[partition]) - 1
        if outcome == "ok":
            history.ok(worker, value, partition, offset)
        elif outcome == "info":
            history.info(worker, value)
        if draw(st.booleans()):
            history.read(partition, offset, value)
            read[partition].add(offset)
        if offset in read[partition] and draw(st.booleans()):  # the group's read prefix
            history.commit("g", partition, min(set(range(offset + 2)) - read[partition]))
    replicas = draw(st.integers(1, 3))
    for partition, log in enumerate(logs):
        history.final(partition, log, replica="broker-0")
        for replica in range(1, replicas):
            kept = draw(st.integers(0, len(log)))
            history.final(partition, log[:kept], replica=f"broker-{replica}")
    return history


@settings(max_examples=200, deadline=None)
@given(valid_histories())
def test_a_random_valid_history_passes(history: History) -> None:
    assert check(history.events) == []


def _mutated(history: History, mutation: str, which: int) -> History:
    """``history`` with one acknowledged record of broker-0's final log dropped, stored
    a second time at its end, or moved to its end."""
    oks = [event for event in history.events if isinstance(event, Ok)]
    victim = oks[which % len(oks)]
    events = []
    for event in history.events:
        if (
            isinstance(event, FinalRead)
            and event.replica == "broker-0"
            and event.partition == victim.partition
        ):
            records = list(event.records)
            end = event.high_watermark
            if mutation in ("drop", "move"):
                records.remove((victim.offset, victim.value))
            if mutation in ("duplicate", "move"):
                records.append((end, victim.value))
                end += 1
            event = dataclasses.replace(event, records=tuple(records), high_watermark=end)
        events.append(event)
    mutated = History()
    mutated.events = events
    return mutated


@settings(max_examples=200, deadline=None)
@given(
    valid_histories(),
    st.sampled_from(["drop", "duplicate", "move"]),
    st.integers(min_value=0),
)
def test_one_mutation_of_a_random_valid_history_is_caught(
    history: History, mutation: str, which: int
) -> None:
    expected = Rule.DUPLICATED if mutation == "duplicate" else Rule.ACKNOWLEDGED_KEPT
    assert expected in rules(check(_mutated(history, mutation, which).events))
