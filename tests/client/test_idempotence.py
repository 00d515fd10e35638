"""Idempotent producer bookkeeping: stamps, sequences, retries and epoch bumps as Kafka's
client keeps them, checked on the batch bytes the broker would receive."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.small_disk import fill_leaving, small_disk_at
from tierlog.client import Producer, RecordFuture
from tierlog.client.consumer import ConsumerRecord
from tierlog.client.errors import IllegalProducerStateError, TierlogError, reason_of
from tierlog.client.futures import RecordMetadata
from tierlog.client.idempotence import (
    MAX_PRODUCER_EPOCH,
    IdempotenceManager,
    increment_sequence,
)
from tierlog.client.producer_batch import CompressionRatioEstimator, ProducerBatch
from tierlog.storage.file_records import FileRecords
from tierlog.storage.records import CompressionType
from tierlog.storage.topic_partition import TopicPartition

from .conftest import SidecarStarter, create_topic, read_back
from .sidecars import LiveSidecar
from .test_durability import consume_to_end

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)


def batch_of(count: int, tp: TopicPartition = TP, codec: str = "none") -> ProducerBatch:
    batch = ProducerBatch(
        tp,
        created_ms=0,
        write_limit_bytes=1 << 20,
        reserved_memory_bytes=0,
        compression=CompressionType[codec.upper()],
        ratio=CompressionRatioEstimator(),
    )
    for n in range(count):
        assert batch.try_append(b"k", b"v%d" % n, 1000 + n) is not None
    return batch


def manager_with_id(epoch: int = 0) -> IdempotenceManager:
    manager = IdempotenceManager()
    manager.set_producer_id_and_epoch(42, epoch)
    return manager


def send(manager: IdempotenceManager, *counts: int, tp: TopicPartition = TP) -> list[ProducerBatch]:
    batches = [batch_of(n, tp) for n in counts]
    for batch in batches:
        manager.stamp(batch)
    return batches


def under_way(manager: IdempotenceManager, tp: TopicPartition = TP) -> ProducerBatch:
    """The partition's first batch of the epoch (one record), sent and acknowledged:
    until it is, it goes alone (``test_the_first_batch_of_an_epoch_goes_alone...``)."""
    [first] = send(manager, 1, tp=tp)
    manager.on_success(first, 0)
    return first


def test_nothing_is_sent_before_the_producer_has_an_id() -> None:
    manager = IdempotenceManager()
    assert manager.needs_producer_id and not manager.may_drain(batch_of(1))
    with pytest.raises(IllegalProducerStateError):
        manager.stamp(batch_of(1))


def test_batches_take_consecutive_sequences_per_partition() -> None:
    manager = manager_with_id()
    [a] = send(manager, 3)
    manager.on_success(a, 0)
    b, c = send(manager, 1, 5)
    [d] = send(manager, 2, tp=OTHER)
    assert [x.base_sequence for x in (a, b, c, d)] == [0, 3, 4, 0]
    for batch in (a, b, c, d):
        header, _ = read_back(batch)
        assert (header.producer_id, header.producer_epoch) == (42, 0)
        assert header.base_sequence == batch.base_sequence
    assert manager.next_sequence(TP) == 9 and manager.in_flight(TP) == (b, c)


@given(st.integers(0, 2**31 - 1), st.integers(1, 10_000))
def test_sequences_wrap_at_int32_max(sequence: int, increment: int) -> None:
    wrapped = increment_sequence(sequence, increment)
    assert 0 <= wrapped < 2**31
    assert wrapped == (sequence + increment) - (2**31 if sequence + increment >= 2**31 else 0)


def test_a_batch_stamped_near_int32_max_wraps_its_last_sequence() -> None:
    manager = manager_with_id()
    [first] = send(manager, 1)
    manager.on_success(first, 0)
    manager._partitions[TP].next_sequence = 2**31 - 2  # as after ~2 billion records
    manager._partitions[TP].last_acked_sequence = 2**31 - 3
    [batch] = send(manager, 5)
    assert (batch.base_sequence, batch.last_sequence) == (2**31 - 2, 2)
    assert manager.next_sequence(TP) == 3
    manager.on_success(batch, 100)
    assert manager.last_acked_sequence(TP) == 2


def test_a_retry_resends_the_same_bytes_and_keeps_its_stamp() -> None:
    manager = manager_with_id()
    [batch] = send(manager, 4)
    before = batch.close()
    assert manager.can_retry(batch, "NETWORK_EXCEPTION")
    manager.stamp(batch)  # a retry is not stamped again
    assert batch.close() is before and batch.base_sequence == 0
    assert manager.next_sequence(TP) == 4


def test_only_the_first_batch_in_flight_may_be_retried_and_five_at_most_fly() -> None:
    manager = manager_with_id()
    under_way(manager)
    a, b, *_ = send(manager, 1, 1, 1, 1, 1)
    assert not manager.may_drain(batch_of(1))  # the broker caches only 5
    assert manager.may_drain(a) and not manager.may_drain(b)
    manager.on_success(a, 0)
    assert manager.may_drain(b) and manager.may_drain(batch_of(1))


def test_the_first_batch_of_an_epoch_goes_alone_until_it_is_acknowledged() -> None:
    """A broker with no state of the producer takes any sequence (Kafka's rule, for a
    producer whose state retention removed). Seen in a failover test: a new leader
    refused sequence 0 (it had not yet applied its leadership) and then stored the
    batches behind it, which went in the same breath; sequence 0 was refused as out
    of order on every retry until its records expired. So a second batch waits until
    the first is acknowledged, again under each new epoch."""
    manager = manager_with_id()
    [first] = send(manager, 2)
    assert not manager.may_drain(batch_of(1))
    assert manager.can_retry(first, "UNKNOWN_LEADER_EPOCH")
    assert not manager.may_drain(batch_of(1))  # behind a retry of the first, still
    manager.stamp(first)
    manager.on_success(first, 0)
    assert len(send(manager, 1, 1, 1, 1, 1)) == 5  # then five fly, as Kafka's do
    [fresh] = send(manager, 1, tp=OTHER)  # each partition's first, alone
    assert not manager.may_drain(batch_of(1, OTHER))
    manager.on_success(fresh, 0)
    assert manager.may_drain(batch_of(1, OTHER))


def test_non_retriable_errors_are_not_retried() -> None:
    manager = manager_with_id()
    [batch] = send(manager, 1)
    assert not manager.can_retry(batch, "MESSAGE_TOO_LARGE")
    assert manager.can_retry(batch, "NOT_LEADER_OR_FOLLOWER")
    assert manager.can_retry(batch, "CORRUPT_MESSAGE")


def test_out_of_order_for_a_batch_behind_a_retry_is_retried_without_a_bump() -> None:
    manager = manager_with_id()
    under_way(manager)
    _a, b = send(manager, 2, 3)
    # a was lost on the way; b reached the broker first and was refused
    assert manager.can_retry(b, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert not manager.epoch_bump_required


def test_out_of_order_for_the_next_batch_is_a_real_gap_bump_epoch_and_restamp() -> None:
    """Kafka 3.x+: the idempotent producer bumps its epoch locally and restamps the
    partition's batches in flight from sequence 0, then retries them, once none of
    their requests is out (an old stamp still out might yet be stored)."""
    manager = manager_with_id(epoch=3)
    [a] = send(manager, 2)
    manager.on_success(a, 0)
    b, c = send(manager, 3, 1)
    [other] = send(manager, 1, tp=OTHER)
    old_bytes = b.close()
    assert manager.can_retry(b, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert manager.epoch_bump_required
    manager.bump_epoch_if_needed()  # c's request is still out: nothing changes yet
    assert manager.producer_id_and_epoch.epoch == 3 and c.producer_epoch == 3
    assert not manager.may_drain(b)  # nor does anything of the partition go out
    assert manager.can_retry(c, "OUT_OF_ORDER_SEQUENCE_NUMBER")  # behind the gap
    manager.bump_epoch_if_needed()
    assert manager.producer_id_and_epoch.epoch == 4
    assert [(x.base_sequence, x.producer_epoch) for x in (b, c)] == [(0, 4), (3, 4)]
    assert manager.next_sequence(TP) == 4
    header, records = read_back(b)  # restamped: new header, valid CRC, same records
    assert (header.producer_epoch, header.base_sequence) == (4, 0)
    assert b.close() != old_bytes and [r.value for r in records] == [b"v0", b"v1", b"v2"]
    assert b.sequence_has_been_reset
    # the other partition keeps its epoch until its batches in flight are done ...
    assert other.producer_epoch == 3
    assert not manager.may_drain(batch_of(1, OTHER))
    manager.on_success(other, 0)
    # ... then starts again at 0 under the new epoch
    [fresh] = send(manager, 1, tp=OTHER)
    assert (fresh.base_sequence, fresh.producer_epoch) == (0, 4)


def test_a_confirmed_failure_leaves_a_gap_and_bumps_the_epoch() -> None:
    manager = manager_with_id()
    under_way(manager)
    a, b = send(manager, 1, 1)
    manager.on_failed(a, "MESSAGE_TOO_LARGE", adjust_sequences=True)
    manager.bump_epoch_if_needed()
    assert b.producer_epoch == 0  # b's request is out: it keeps its stamp until answered
    assert manager.can_retry(b, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    manager.bump_epoch_if_needed()
    assert manager.producer_id_and_epoch.epoch == 1
    assert (b.base_sequence, b.producer_epoch) == (0, 1)


def test_a_transactional_producer_leaves_the_epoch_to_its_coordinator() -> None:
    """The gap's partition waits: the transaction aborts, and the next epoch comes from
    InitProducerId (tierlog.client.transactions), which starts every partition again."""
    manager = IdempotenceManager(transactional=True)
    manager.set_producer_id_and_epoch(42, 0)
    under_way(manager)
    a, b = send(manager, 1, 1)
    manager.on_failed(a, "MESSAGE_TOO_LARGE", adjust_sequences=True)
    assert manager.can_retry(b, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    manager.bump_epoch_if_needed()
    waiting = manager.epoch_bump_required  # (a name: mypy would narrow the property)
    assert manager.producer_id_and_epoch.epoch == 0 and waiting
    assert not manager.may_drain(b)
    manager.set_producer_id_and_epoch(42, 1)  # the coordinator's next epoch
    assert not manager.epoch_bump_required and manager.next_sequence(TP) == 0


def test_a_restamped_batch_is_never_sent_while_its_old_stamp_is_out() -> None:
    """The old request of a batch may still be stored: restamping it then would let a
    later batch go out under the new epoch at a sequence the broker never starts at."""
    manager = manager_with_id()
    under_way(manager)
    a, b, c = send(manager, 1, 1, 1)
    manager.on_failed(b, "MESSAGE_TOO_LARGE", adjust_sequences=True)
    manager.bump_epoch_if_needed()
    manager.on_success(a, 1)  # a, ahead of the gap, is stored under its old stamp
    assert manager.can_retry(c, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    manager.bump_epoch_if_needed()
    assert (c.producer_epoch, c.base_sequence) == (1, 0)
    assert manager.may_drain(c) and manager.next_sequence(TP) == 1


def test_one_failure_episode_costs_one_bump_however_many_batches_fail_in_it() -> None:
    """Every attempt under the new epoch was refused (the disk is still full): nothing
    of the partition is stored under it, so its sequences start again under it."""
    manager = manager_with_id()
    under_way(manager)
    a, b, c = send(manager, 1, 1, 1)
    for batch in (a, b, c):
        assert manager.can_retry(batch, "KAFKA_STORAGE_ERROR")
    manager.on_failed(a, "KAFKA_STORAGE_ERROR", adjust_sequences=True)
    manager.bump_epoch_if_needed()
    assert manager.producer_id_and_epoch.epoch == 1
    assert [(x.producer_epoch, x.base_sequence) for x in (b, c)] == [(1, 0), (1, 1)]
    manager.stamp(b)
    manager.on_failed(b, "KAFKA_STORAGE_ERROR", adjust_sequences=True)
    manager.bump_epoch_if_needed()
    assert manager.producer_id_and_epoch.epoch == 1  # no bump: nothing stored under 1
    assert (c.producer_epoch, c.base_sequence) == (1, 0)


def test_a_partition_behind_the_producer_epoch_starts_again_without_a_bump() -> None:
    manager = manager_with_id()
    p0, p1 = send(manager, 1)[0], send(manager, 1, tp=OTHER)[0]
    manager.on_success(p0, 0)
    manager.on_success(p1, 0)
    a, b = send(manager, 1, 1)
    c, d = send(manager, 1, 1, tp=OTHER)
    manager.on_failed(a, "MESSAGE_TOO_LARGE", adjust_sequences=True)
    assert manager.can_retry(b, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    manager.bump_epoch_if_needed()
    assert manager.producer_id_and_epoch.epoch == 1
    manager.on_failed(c, "MESSAGE_TOO_LARGE", adjust_sequences=True)
    assert manager.can_retry(d, "OUT_OF_ORDER_SEQUENCE_NUMBER")
    manager.bump_epoch_if_needed()
    assert manager.producer_id_and_epoch.epoch == 1  # OTHER was at 0: 1 is new to it
    assert (d.producer_epoch, d.base_sequence) == (1, 0)


def test_unknown_producer_id_is_retried_with_an_epoch_bump() -> None:
    manager = manager_with_id()
    [a] = send(manager, 1)
    assert manager.can_retry(a, "UNKNOWN_PRODUCER_ID", log_start_offset=-1)
    assert not manager.epoch_bump_required  # no log start offset yet: just retry
    assert manager.can_retry(a, "UNKNOWN_PRODUCER_ID", log_start_offset=10)
    manager.bump_epoch_if_needed()
    assert (a.base_sequence, a.producer_epoch) == (0, 1)
    assert manager.can_retry(a, "UNKNOWN_PRODUCER_ID", log_start_offset=10)
    assert not manager.epoch_bump_required  # already restamped once


def test_an_expired_batch_leaves_its_partition_unresolved_until_the_rest_settle() -> None:
    manager = manager_with_id()
    under_way(manager)
    a, b = send(manager, 2, 2)
    manager.on_expired(a)
    assert manager.has_unresolved_sequence(TP)
    assert not manager.may_drain(batch_of(1))
    manager.on_success(b, 10)  # b stored after a: a must have been stored too
    manager.bump_epoch_if_needed()
    assert not manager.has_unresolved_sequence(TP) and not manager.epoch_bump_required
    assert manager.may_drain(batch_of(1))


def test_an_expired_batch_that_was_not_stored_bumps_the_epoch() -> None:
    manager = manager_with_id()
    under_way(manager)
    [b] = send(manager, 2)
    manager.on_expired(b)
    manager.bump_epoch_if_needed()
    assert manager.producer_id_and_epoch.epoch == 1
    [fresh] = send(manager, 1)
    assert (fresh.base_sequence, fresh.producer_epoch) == (0, 1)


def test_an_exhausted_epoch_asks_for_a_new_producer_id() -> None:
    manager = manager_with_id(epoch=MAX_PRODUCER_EPOCH)
    under_way(manager)
    [a] = send(manager, 1)
    manager.on_failed(a, "OUT_OF_ORDER_SEQUENCE_NUMBER", adjust_sequences=False)
    manager.bump_epoch_if_needed()
    assert manager.needs_producer_id and not manager.may_drain(batch_of(1))
    manager.set_producer_id_and_epoch(43, 0)
    [fresh] = send(manager, 1)
    assert (fresh.producer_id, fresh.producer_epoch, fresh.base_sequence) == (43, 0, 0)


def test_a_duplicate_answer_is_success_without_an_offset() -> None:
    manager = manager_with_id()
    [a] = send(manager, 3)
    manager.on_success(a, None)
    assert manager.last_acked_sequence(TP) == 2 and manager.in_flight(TP) == ()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_stamping_a_built_compressed_batch_patches_only_the_header(codec: str) -> None:
    batch = batch_of(20, codec=codec)
    unstamped = batch.close()
    batch.set_producer_state(7, 2, 100)
    stamped = batch.close()
    assert stamped[61:] == unstamped[61:]  # the compressed records are untouched
    header, records = read_back(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 100)
    assert len(records) == 20
    with pytest.raises(IllegalProducerStateError):
        batch.set_producer_state(7, 2, 120)


# --- on a real full disk -----------------------------------------------------------------


@contextlib.contextmanager
def sidecar_on_small_disk(
    sidecars: SidecarStarter, tmp_path: Path, partitions: int
) -> Iterator[tuple[LiveSidecar, Path]]:
    """A sidecar whose data directory is on an 8 MiB tmpfs (the disk, yielded too, for
    ``fill_leaving``), with a topic ``full`` of ``partitions`` partitions."""
    with small_disk_at(tmp_path / "disk", "8m") as disk:
        sidecar = sidecars("disk/data", "log.index.size.max.bytes=4096")
        create_topic(sidecar.address, "full", partitions=partitions)
        yield sidecar, disk


def send_numbered(producer: Producer, numbers: range, padding: bytes = b"") -> list[RecordFuture]:
    """Send record ``i`` of ``numbers`` to ``full`` keyed ``i`` (so its partition and
    its place in the send order can be read back), its value ``i`` then ``padding``."""
    return [producer.send("full", b"%d" % i + padding, key=b"%d" % i) for i in numbers]


# Short timeouts, so that a disk kept full for a second or two outlasts delivery.timeout.ms.
OUTLASTED_DELIVERY_TIMEOUT = {
    "linger.ms": 0,
    "retry.backoff.ms": 20,
    "request.timeout.ms": 1000,
    "delivery.timeout.ms": 1500,
}


def assert_read_once_in_order(
    records: list[ConsumerRecord], metadata: list[RecordMetadata], partitions: int
) -> None:
    """Each acknowledged record was stored exactly once, and each partition holds its
    records in the order they were sent (their keys are their send order)."""
    acknowledged = {(m.partition, m.offset) for m in metadata}
    assert {(r.partition, r.offset) for r in records} == acknowledged
    assert len(records) == len(acknowledged)  # stored once each
    for partition in range(partitions):
        sent = [int(r.key or b"-1") for r in records if r.partition == partition]
        assert sent == sorted(sent)


def test_an_idempotent_producer_resumes_once_a_full_disk_has_room_again(
    sidecars: SidecarStarter, tmp_path: Path
) -> None:
    """The sidecar's disk fills while records are in flight: their appends fail with
    KAFKA_STORAGE_ERROR, retriable, and are retried under the same stamp (the sidecar
    stored none of them).  Once space is freed the producer goes on within
    delivery.timeout.ms: every send succeeds, and a consumer reads each acknowledged
    record exactly once, in the order it was sent in its partition."""
    with sidecar_on_small_disk(sidecars, tmp_path, partitions=2) as (sidecar, disk):
        config = {"bootstrap.servers": sidecar.address, "linger.ms": 0, "retry.backoff.ms": 20}
        with Producer(config) as producer:
            futures = send_numbered(producer, range(100))
            assert producer.flush(timeout_s=30)
            filler = fill_leaving(disk, 16 * 1024)
            value = bytes(1024)  # 200 KiB in all: more than is left
            futures += send_numbered(producer, range(100, 300), padding=value)
            deadline = time.monotonic() + 30
            while "no space left" not in sidecar.output:  # the sidecar refused an append
                assert time.monotonic() < deadline, "the disk never filled up"
                time.sleep(0.05)
            filler.unlink()
            futures += send_numbered(producer, range(300, 400))
            assert producer.flush(timeout_s=60)
            metadata = [future.result(timeout=0) for future in futures]  # raises if any failed
        records = consume_to_end(sidecar.address, "full")
    assert_read_once_in_order(records, metadata, partitions=2)
    assert len(records) == 400


def test_after_a_full_disk_outlasted_delivery_timeout_the_producer_goes_on_losing_nothing(
    sidecars: SidecarStarter, tmp_path: Path
) -> None:
    """The disk stays full past delivery.timeout.ms: records fail for good (the sidecar
    stored none of them), their partitions' sequences restart under a newer epoch
    (KIP-360), and the batches behind them are restamped.  Once space is freed
    the producer goes on: every later send succeeds, each acknowledged record is read
    exactly once and in order, and no failed one was stored."""
    with sidecar_on_small_disk(sidecars, tmp_path, partitions=2) as (sidecar, disk):
        config = {"bootstrap.servers": sidecar.address, **OUTLASTED_DELIVERY_TIMEOUT}
        with Producer(config) as producer:
            futures = send_numbered(producer, range(100))
            assert producer.flush(timeout_s=30)
            filler = fill_leaving(disk, 16 * 1024)
            value = bytes(1024)
            while_full = send_numbered(producer, range(100, 300), padding=value)
            deadline = time.monotonic() + 30
            while not any(future.done() and future.exception() for future in while_full):
                assert time.monotonic() < deadline, "no record failed while the disk was full"
                time.sleep(0.05)
            filler.unlink()
            after = send_numbered(producer, range(300, 400))
            assert producer.flush(timeout_s=60)
            assert producer.idempotence is not None
            assert producer.idempotence.producer_id_and_epoch.epoch > 0  # bumped on the way
            metadata = [future.result(timeout=0) for future in futures + after]
            metadata += [future.result() for future in while_full if not future.exception()]
            failed = {i for i, future in enumerate(while_full, 100) if future.exception()}
        records = consume_to_end(sidecar.address, "full")
    assert_read_once_in_order(records, metadata, partitions=2)
    assert not failed & {int(r.key or b"-1") for r in records}  # none stored


def stored_producer_epochs(data_dir: Path, topic: str) -> set[int]:
    """The producer epoch of every batch the sidecar stored for ``topic``, from its files."""
    epochs: set[int] = set()
    for path in data_dir.glob(f"{topic}-*/*.log"):
        records = FileRecords(path, read_only=True)
        try:
            epochs |= {batch.header.producer_epoch for batch in records.headers()}
        finally:
            records.close()
    return epochs


def test_a_disk_full_past_delivery_timeout_bumps_the_epoch_once_per_partition_at_most(
    sidecars: SidecarStarter, tmp_path: Path
) -> None:
    """Many small batches of three partitions are pipelined (five requests each) when
    the disk fills, and it stays full until every one of them has failed.  Each
    partition has one failure episode, so its sequences restart under a new epoch once
    (Kafka: the partition is bumped once its requests in flight are done, and the
    batches still queued for it are restamped from sequence 0): the epoch climbs by
    at most one a partition.  A send fails with the disk's error or the delivery
    timeout, never OUT_OF_ORDER_SEQUENCE_NUMBER; once space is freed every send
    succeeds, and each acknowledged record is read back exactly once, in order."""
    partitions = 3
    with sidecar_on_small_disk(sidecars, tmp_path, partitions) as (sidecar, disk):
        config = {
            "bootstrap.servers": sidecar.address,
            **OUTLASTED_DELIVERY_TIMEOUT,
            "batch.size": 2048,  # one or two records a batch
            "max.in.flight.requests.per.connection": 5,
        }
        with Producer(config) as producer:
            before = send_numbered(producer, range(90))
            assert producer.flush(timeout_s=30)
            assert producer.idempotence is not None
            first_epoch = producer.idempotence.producer_id_and_epoch.epoch
            filler = fill_leaving(disk, 16 * 1024)
            value = bytes(1024)  # 300 KiB in all: far more than is left
            while_full = send_numbered(producer, range(90, 390), padding=value)
            deadline = time.monotonic() + 60
            while not all(future.done() for future in while_full):  # full past the timeout
                assert time.monotonic() < deadline, "records still pending on a full disk"
                time.sleep(0.05)
            filler.unlink()
            after = send_numbered(producer, range(390, 490))
            assert producer.flush(timeout_s=60)
            last_epoch = producer.idempotence.producer_id_and_epoch.epoch
            failures = [future.exception() for future in while_full if future.exception()]
            metadata = [future.result(timeout=0) for future in before + after]
            metadata += [future.result() for future in while_full if not future.exception()]
        records = consume_to_end(sidecar.address, "full")
        epochs = stored_producer_epochs(disk / "data", "full")
    assert failures, "nothing failed: the disk was not full past delivery.timeout.ms"
    reasons = {reason_of(error) for error in failures if isinstance(error, TierlogError)}
    assert reasons <= {"KAFKA_STORAGE_ERROR", "REQUEST_TIMED_OUT"}, reasons
    assert all(isinstance(error, TierlogError) for error in failures), failures
    assert 0 < last_epoch - first_epoch <= partitions, (first_epoch, last_epoch)
    assert len(epochs) <= 1 + partitions, sorted(epochs)
    assert_read_once_in_order(records, metadata, partitions)
