"""Idempotent produce through the Log: retries are answered, never stored twice; fenced
and out-of-order batches are typed errors that leave the log as it was; producer state
survives clean and unclean restarts through ``.snapshot`` files."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.storage.conftest import T0, FakeClock, config, headers_of, read_all_bytes
from tests.storage.test_log_properties import abandon
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import (
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TierlogError,
)
from tierlog.storage.log import AppendInfo, Log
from tierlog.storage.producer_snapshot import list_snapshot_offsets, snapshot_path
from tierlog.storage.records import SimpleRecord, build_batch

INT32_MAX = 2**31 - 1
# About three 2-record batches to a segment: rolls, and so snapshots, come often.
SMALL = config(segment_bytes=300, index_interval_bytes=0)


def idempotent_batch(
    producer_id: int,
    epoch: int,
    sequence: int,
    count: int = 2,
    *,
    transactional: bool = False,
    tag: str = "v",
) -> bytes:
    records = [
        SimpleRecord(key=f"k{i}".encode(), value=f"{tag}{i}".encode(), timestamp=T0 + i)
        for i in range(count)
    ]
    return build_batch(
        records,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )


def stored(log: Log) -> list[tuple[int, int, int, int]]:
    """(base offset, producer id, epoch, base sequence) of every batch in the log."""
    return [
        (h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence)
        for h in headers_of(read_all_bytes(log))
    ]


@pytest.fixture
def log(log_dir: Path) -> Log:
    return Log.open(log_dir, SMALL, clock_ms=FakeClock())


def test_a_retried_batch_is_answered_with_its_original_offsets_and_not_stored(log: Log) -> None:
    first = log.append(idempotent_batch(7, 0, 0, 3))
    log.append(idempotent_batch(8, 0, 0, 1))
    retry = log.append(idempotent_batch(7, 0, 0, 3))
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert retry.duplicate and not first.duplicate and retry.size_bytes == 0
    assert log.log_end_offset == 4
    assert [b[1:] for b in stored(log)] == [(7, 0, 0), (8, 0, 0)]


def test_a_retry_is_not_acknowledged_before_its_first_copy_is_synced(log_dir: Path) -> None:
    """flush.messages=1: the first append is fsyncing (held at the gate) when its retry
    arrives; the retry is answered only once the first copy is on disk."""
    log = Log.open(log_dir, config(flush_messages=1), clock_ms=FakeClock())
    gate, flushes = threading.Event(), threading.Semaphore(0)

    def gated_flush(target: Log) -> None:
        flushes.release()
        assert gate.wait(30)
        Log.flush(target)

    log.flush_hook = gated_flush
    batch = idempotent_batch(7, 0, 0, 3)

    def retry() -> tuple[AppendInfo, int]:
        answer = log.append(batch)
        return answer, log.recovery_point  # how much was synced when it was answered

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(log.append, batch)
        assert flushes.acquire(timeout=30)
        retried = pool.submit(retry)
        # It syncs too (held at the gate), or, were it answered at once, it is back.
        deadline = time.monotonic() + 30
        while not retried.done() and not flushes.acquire(timeout=0.05):
            assert time.monotonic() < deadline, "the retry neither synced nor came back"
        assert not retried.done() and log.recovery_point == 0
        gate.set()
        answer, synced = retried.result(timeout=30)
    assert answer.duplicate and not first.result(timeout=30).duplicate
    assert synced >= answer.last_offset + 1 == 3
    assert [b[1:] for b in stored(log)] == [(7, 0, 0)]
    log.close()


def test_any_of_the_last_five_batches_is_a_duplicate_but_not_the_sixth(log: Log) -> None:
    infos = [log.append(idempotent_batch(7, 0, 2 * i)) for i in range(6)]
    end = log.log_end_offset
    for i in range(1, 6):
        retry = log.append(idempotent_batch(7, 0, 2 * i))
        assert retry.duplicate and retry.first_offset == infos[i].first_offset
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent_batch(7, 0, 0))
    assert log.log_end_offset == end


@pytest.mark.parametrize(
    ("batch", "error"),
    [
        (idempotent_batch(7, 1, 6), OutOfOrderSequenceError),  # a gap
        (idempotent_batch(7, 1, 3), OutOfOrderSequenceError),  # overlaps, not a retry
        (idempotent_batch(7, 0, 4), InvalidProducerEpochError),  # fenced
        (idempotent_batch(7, 2, 5), OutOfOrderSequenceError),  # new epoch not at 0
        (idempotent_batch(7, 1, 4, transactional=True), None),
    ],
)
def test_bad_sequences_and_epochs_are_typed_errors_that_change_nothing(
    log: Log, batch: bytes, error: type[TierlogError] | None
) -> None:
    log.append(idempotent_batch(7, 1, 0, 2))
    log.append(idempotent_batch(7, 1, 2, 2))
    before, files = stored(log), {p.name: p.read_bytes() for p in log.directory.iterdir()}
    if error is None:
        log.append(batch)
        return
    with pytest.raises(error) as raised:
        log.append(batch)
    assert raised.value.reason in {"OUT_OF_ORDER_SEQUENCE_NUMBER", "INVALID_PRODUCER_EPOCH"}
    assert stored(log) == before
    assert {p.name: p.read_bytes() for p in log.directory.iterdir()} == files
    log.append(idempotent_batch(7, 1, 4))  # the producer carries on where it was


def test_a_new_epoch_starts_at_zero_and_fences_the_old_one(log: Log) -> None:
    log.append(idempotent_batch(7, 0, 0))
    log.append(idempotent_batch(7, 3, 0))
    with pytest.raises(InvalidProducerEpochError):
        log.append(idempotent_batch(7, 0, 2))
    with pytest.raises(InvalidProducerEpochError):
        log.append(idempotent_batch(7, 0, 0))  # a retry from the fenced epoch too


def test_an_unknown_producer_may_start_at_any_sequence_as_in_kafka_4(log: Log) -> None:
    log.append(idempotent_batch(7, 0, 1000))
    log.append(idempotent_batch(7, 0, 1002))


def test_sequences_wrap_at_int32_max(log: Log) -> None:
    log.append(idempotent_batch(7, 0, INT32_MAX - 1, 2))
    log.append(idempotent_batch(7, 0, 0, 3))
    retry = log.append(idempotent_batch(7, 0, INT32_MAX - 1, 2))  # first/last seq wrap too
    assert retry.duplicate and retry.first_offset == 0
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idempotent_batch(7, 0, INT32_MAX, 2))


def test_a_request_is_checked_whole_before_anything_is_written(log: Log) -> None:
    good, bad = idempotent_batch(7, 0, 0), idempotent_batch(7, 0, 5)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(good + bad)
    assert log.log_end_offset == 0
    info = log.append(good + idempotent_batch(7, 0, 2) + idempotent_batch(9, 0, 0))
    retry = log.append(good + idempotent_batch(7, 0, 2) + idempotent_batch(9, 0, 0))
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, info.last_offset)
    with pytest.raises(DuplicateSequenceError):
        log.append(idempotent_batch(9, 0, 0) + idempotent_batch(9, 0, 2))
    assert log.log_end_offset == info.last_offset + 1


def test_a_transaction_stays_open_until_its_marker(log: Log) -> None:
    log.append(idempotent_batch(7, 0, 0, transactional=True))
    log.append(idempotent_batch(7, 0, 2, transactional=True))
    entry = log.producer_state.last_entry(7)
    assert entry is not None and entry.current_txn_first_offset == 0
    with pytest.raises(InvalidTxnStateError):
        log.append(idempotent_batch(7, 0, 4))


def test_snapshots_are_written_at_roll_and_at_close(log_dir: Path) -> None:
    log = Log.open(log_dir, SMALL)
    for i in range(8):
        log.append(idempotent_batch(7, 0, 2 * i))
    bases = [segment.base_offset for segment in log.segments]
    assert len(bases) > 2
    assert list_snapshot_offsets(log_dir)[-1] == bases[-1]
    assert set(list_snapshot_offsets(log_dir)) <= set(bases[1:])
    log.close()
    assert list_snapshot_offsets(log_dir)[-1] == 16
    reopened = Log.open(log_dir, SMALL, recovery_point=16, clean_shutdown=True)
    entry = reopened.producer_state.last_entry(7)
    assert entry is not None and (entry.last_seq, entry.last_data_offset) == (15, 15)
    assert reopened.append(idempotent_batch(7, 0, 14)).duplicate
    reopened.close()


def test_old_snapshots_are_pruned(log_dir: Path) -> None:
    log = Log.open(log_dir, SMALL)
    for i in range(30):
        log.append(idempotent_batch(7, 0, 2 * i))
        if i % 4 == 0:
            log.flush()
    # Each roll keeps the two newest at or below the recovery point, and all above it.
    snapshots = list_snapshot_offsets(log_dir)
    assert len(log.segments) == 10 and 2 <= len(snapshots) <= 4
    assert snapshots[-1] == log.active_segment.base_offset
    log.close()


def test_state_survives_a_crash_and_a_retry_is_still_a_duplicate(log_dir: Path) -> None:
    log = Log.open(log_dir, SMALL)
    infos = [log.append(idempotent_batch(p, 0, 2 * i)) for i in range(7) for p in (7, 9)]
    recovery_point = log.recovery_point
    abandon(log)  # killed: no close, no snapshot at the end
    reopened = Log.open(log_dir, SMALL, recovery_point=recovery_point)
    for info, producer, sequence in ((infos[-1], 9, 12), (infos[-2], 7, 12)):
        retry = reopened.append(idempotent_batch(producer, 0, sequence))
        assert retry.duplicate and retry.first_offset == info.first_offset
    with pytest.raises(OutOfOrderSequenceError):
        reopened.append(idempotent_batch(7, 0, 16))
    reopened.append(idempotent_batch(7, 0, 14))
    reopened.close()


def test_a_corrupt_snapshot_is_ignored_and_state_rebuilt_from_further_back(log_dir: Path) -> None:
    log = Log.open(log_dir, SMALL)
    for i in range(8):
        log.append(idempotent_batch(7, 0, 2 * i))
    log.close()
    snapshots = list_snapshot_offsets(log_dir)
    for offset in snapshots:  # every one: state comes from the log alone
        path = snapshot_path(log_dir, offset)
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    reopened = Log.open(log_dir, SMALL, recovery_point=16, clean_shutdown=True)
    assert list_snapshot_offsets(log_dir) == []  # deleted, as Kafka does
    assert reopened.append(idempotent_batch(7, 0, 14)).duplicate
    assert reopened.append(idempotent_batch(7, 0, 10)).duplicate  # replayed: five batches
    reopened.close()


def test_truncation_drops_later_snapshots_and_rewinds_the_producers(log_dir: Path) -> None:
    log = Log.open(log_dir, SMALL)
    for i in range(8):
        log.append(idempotent_batch(7, 0, 2 * i))
    log.truncate_to(7)  # whole batches: keeps offsets 0-5
    assert all(offset <= 6 for offset in list_snapshot_offsets(log_dir))
    entry = log.producer_state.last_entry(7)
    assert entry is not None and entry.last_seq == 5
    assert log.append(idempotent_batch(7, 0, 6)).first_offset == 6
    log.truncate_fully_and_start_at(100)
    assert list_snapshot_offsets(log_dir) == [] and log.producer_state.last_entry(7) is None
    log.close()


def test_retention_forgets_producers_below_the_new_log_start(log_dir: Path) -> None:
    clock = FakeClock()
    log = Log.open(log_dir, SMALL, clock_ms=clock)
    log.append(idempotent_batch(7, 0, 0))
    for i in range(8):
        log.append(idempotent_batch(9, 0, 2 * i))
    log.increment_log_start_offset(8)
    assert log.delete_old_segments() > 0
    assert log.producer_state.last_entry(7) is None
    assert log.producer_state.last_entry(9) is not None
    assert all(offset >= log.segments[0].base_offset for offset in list_snapshot_offsets(log_dir))
    log.append(idempotent_batch(7, 0, 2))  # its state is gone: any sequence, as Kafka
    log.close()
    reopened = Log.open(log_dir, SMALL, log_start_offset=8, clean_shutdown=True)
    entry = reopened.producer_state.last_entry(7)
    assert entry is not None and entry.last_seq == 3
    reopened.close()


# -- the model ------------------------------------------------------------------------

PRODUCERS = (7, 9)


@dataclass
class ProducerModel:
    epoch: int = 0
    next_sequence: int = 0
    # (epoch, first sequence, count, first offset) of every batch written, in order
    written: list[tuple[int, int, int, int]] = field(default_factory=list)


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.sampled_from(PRODUCERS), st.integers(1, 3)),
        st.tuples(st.just("retry"), st.sampled_from(PRODUCERS), st.integers(0, 7)),
        st.tuples(st.just("gap"), st.sampled_from(PRODUCERS), st.integers(1, 3)),
        st.tuples(st.just("fenced"), st.sampled_from(PRODUCERS), st.just(0)),
        st.tuples(st.just("bump"), st.sampled_from(PRODUCERS), st.just(0)),
        st.tuples(st.just("reopen"), st.sampled_from(("clean", "crash")), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPERATIONS)
def test_the_log_against_a_model_of_idempotent_producers(
    operations: list[tuple[str, object, int]],
) -> None:
    root = Path(tempfile.mkdtemp(prefix="tierlog-idem-"))
    try:
        run_model(root / "t-0", SMALL, operations)
    finally:
        shutil.rmtree(root)


def run_model(
    directory: Path, log_config: LogConfig, operations: list[tuple[str, object, int]]
) -> None:
    log = Log.open(directory, log_config)
    producers = {pid: ProducerModel() for pid in PRODUCERS}
    expected: list[tuple[int, int, int, int]] = []  # (base offset, pid, epoch, sequence)
    for operation, subject, number in operations:
        if operation == "reopen":
            log = reopen(log, directory, log_config, clean=subject == "clean")
            continue
        assert isinstance(subject, int)
        model = producers[subject]
        end = log.log_end_offset
        if operation == "send" or operation == "bump":
            if operation == "bump":
                model.epoch, model.next_sequence = model.epoch + 1, 0
            count = number if operation == "send" else 1
            info = log.append(idempotent_batch(subject, model.epoch, model.next_sequence, count))
            assert not info.duplicate and info.first_offset == end
            model.written.append((model.epoch, model.next_sequence, count, end))
            expected.append((end, subject, model.epoch, model.next_sequence))
            model.next_sequence += count
        elif operation == "retry" and number < len(model.written):
            epoch, sequence, count, first_offset = model.written[-1 - number]
            batch = idempotent_batch(subject, epoch, sequence, count)
            if epoch < model.epoch:
                with pytest.raises(InvalidProducerEpochError):
                    log.append(batch)
            elif number == 0:  # the last batch is always known, restarts or not
                info = log.append(batch)
                assert info.duplicate and info.first_offset == first_offset
            else:
                try:
                    info = log.append(batch)
                except OutOfOrderSequenceError:  # older than the cached batches
                    pass
                else:
                    assert info.duplicate and info.first_offset == first_offset
        elif operation == "gap" and model.written:
            with pytest.raises(OutOfOrderSequenceError):
                log.append(idempotent_batch(subject, model.epoch, model.next_sequence + number))
        elif operation == "fenced" and model.epoch > 0:
            with pytest.raises(InvalidProducerEpochError):
                log.append(idempotent_batch(subject, model.epoch - 1, model.next_sequence))
        assert log.log_end_offset >= end
    assert stored(log) == expected
    log.close()


def reopen(log: Log, directory: Path, log_config: LogConfig, *, clean: bool) -> Log:
    if clean:
        log.close()
        return Log.open(
            directory, log_config, recovery_point=log.log_end_offset, clean_shutdown=True
        )
    recovery_point = log.recovery_point
    abandon(log)
    return Log.open(directory, log_config, recovery_point=recovery_point)
