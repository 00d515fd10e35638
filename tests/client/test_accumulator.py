"""The RecordAccumulator: linger and batch size decide when a partition's batch goes,
compression and max.request.size shape it, buffer.memory bounds what waits."""

from __future__ import annotations

import os
import random
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tierlog.client.accumulator import AppendResult, MemoryBlocked, RecordAccumulator
from tierlog.client.config import ProducerConfig
from tierlog.client.errors import BufferExhaustedError, RecordTooLargeError
from tierlog.client.futures import RecordFuture
from tierlog.client.partitioner import StickyPartitioner, partition_for_key
from tierlog.client.producer_batch import ProducerBatch
from tierlog.storage.records import CompressionType, SimpleRecord
from tierlog.storage.topic_partition import TopicPartition

from .conftest import FakeClock, add, appended, as_simple, producer, read_back

TP0 = TopicPartition("t", 0)


def record(n: int, size: int = 100, key: bytes | None = b"k") -> SimpleRecord:
    return SimpleRecord(key=key, value=n.to_bytes(4, "big") * (size // 4), timestamp=1000 + n)


# --- when a batch is ready ---------------------------------------------------------------


def test_a_batch_waits_linger_ms_then_is_ready(clock: FakeClock) -> None:
    acc, _ = producer(clock, {"linger.ms": 20})
    appended(add(acc, "t", record(0), num_partitions=1))
    check = acc.ready()
    assert check.ready == frozenset() and check.next_check_delay_ms == 20
    clock.advance(19)
    assert acc.ready().ready == frozenset()
    assert acc.ready().next_check_delay_ms == 1
    clock.advance(1)
    assert acc.ready().ready == {TP0}


def test_a_full_batch_is_ready_at_once_and_the_next_record_opens_a_new_one(
    clock: FakeClock,
) -> None:
    acc, _ = producer(clock, {"linger.ms": 60_000, "batch.size": 1000})
    results = [appended(add(acc, "t", record(n), num_partitions=1)) for n in range(12)]
    first = results[0].batch
    assert [r.batch for r in results].count(first) == 8  # 61 + 8 * ~116 bytes < 1000
    assert results[8].new_batch_created and results[8].batch_is_full
    assert acc.ready().ready == {TP0}
    [drained] = acc.drain([TP0])
    assert drained is first and drained.record_count == 8
    assert len(drained.close()) <= 1000


def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own(clock: FakeClock) -> None:
    acc, _ = producer(clock, {"batch.size": 500})
    big = appended(add(acc, "t", record(0, size=2000), num_partitions=1))
    assert big.batch.record_count == 1 and big.batch.write_limit_bytes > 2000
    small = appended(add(acc, "t", record(1), num_partitions=1))
    assert small.batch is not big.batch and small.new_batch_created


def test_batch_size_zero_sends_every_record_alone(clock: FakeClock) -> None:
    acc, _ = producer(clock, {"batch.size": 0})
    batches = {id(appended(add(acc, "t", record(n), num_partitions=1)).batch) for n in range(5)}
    assert len(batches) == 5


def test_flush_and_close_make_everything_ready(clock: FakeClock) -> None:
    acc, _ = producer(clock, {"linger.ms": 60_000})
    appended(add(acc, "t", record(0), num_partitions=1))
    assert acc.ready().ready == frozenset()
    acc.begin_flush()
    assert acc.ready().ready == {TP0}
    acc.end_flush()
    assert acc.ready().ready == frozenset()
    acc.close()
    assert acc.ready().ready == {TP0}
    with pytest.raises(RuntimeError):
        add(acc, "t", record(1), num_partitions=1)


def test_a_record_without_a_timestamp_gets_the_clocks(clock: FakeClock) -> None:
    acc, _ = producer(clock)
    appended(add(acc, "t", SimpleRecord(b"k", b"v"), num_partitions=1))
    clock.advance(5)
    [batch] = acc.drain([TP0])
    _, [stored] = read_back(batch)
    assert stored.timestamp == clock.now_ms - 5


# --- partitions ------------------------------------------------------------------------


def test_keys_are_partitioned_by_murmur2_and_null_keys_stick(clock: FakeClock) -> None:
    acc, _ = producer(clock)
    for key in (b"a", b"b", b"user-42"):
        result = appended(add(acc, "t", record(0, key=key), num_partitions=12))
        assert result.batch.topic_partition.partition == partition_for_key(key, 12)
    null_partitions = {
        appended(add(acc, "t", record(n, key=None), num_partitions=12)).batch.topic_partition
        for n in range(10)
    }
    assert len(null_partitions) == 1


def test_partitioner_ignore_keys_treats_keys_as_null(clock: FakeClock) -> None:
    config = ProducerConfig(partitioner_ignore_keys=True)
    acc = RecordAccumulator(config, clock, partitioner=StickyPartitioner(16384, random.Random(1)))
    partitions = {
        appended(add(acc, "t", record(n, key=bytes([n])), num_partitions=64)).batch
        for n in range(10)
    }
    assert len(partitions) == 1


def _null_key_runs(acc: RecordAccumulator, count: int, *, send: bool) -> list[int]:
    """How many consecutive null-key records each sticky partition took."""
    runs: list[int] = []
    last = None
    for n in range(count):
        tp = appended(add(acc, "t", record(n, key=None), num_partitions=1000)).batch.topic_partition
        if tp != last:
            runs.append(0)
            last = tp
        runs[-1] += 1
        if send:
            for batch in acc.drain(list(acc.ready().ready)):
                acc.deallocate(batch)
    return runs


def test_null_keys_move_once_batch_size_bytes_went_and_the_batch_was_sent(
    clock: FakeClock,
) -> None:
    """KIP-794: the sticky partition moves at a batch boundary after batch.size bytes;
    a sent batch is such a boundary.  Each record takes 108 bytes, so the tenth
    reaches batch.size 1000."""
    config = ProducerConfig(batch_size=1000, linger_ms=0)
    partitioner = StickyPartitioner(config.batch_size, random.Random(4))
    acc = RecordAccumulator(config, clock, partitioner=partitioner)
    assert _null_key_runs(acc, 100, send=True)[:-1] == [10] * 9


def test_null_keys_move_after_twice_batch_size_while_batches_wait(clock: FakeClock) -> None:
    """Without a send, the record that overflows a batch opens the next one on the same
    partition, which is not full: the move waits for 2 x batch.size bytes (the 19th
    108-byte record)."""
    config = ProducerConfig(batch_size=1000, linger_ms=60_000)
    partitioner = StickyPartitioner(config.batch_size, random.Random(4))
    acc = RecordAccumulator(config, clock, partitioner=partitioner)
    assert _null_key_runs(acc, 100, send=False)[:-1] == [19] * 5


def test_an_explicit_partition_must_exist(clock: FakeClock) -> None:
    acc, _ = producer(clock)
    with pytest.raises(ValueError):
        add(acc, "t", record(0), num_partitions=3, partition=3)


# --- compression ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_drained_batches_are_v2_batches_in_the_configured_codec(
    clock: FakeClock, codec: str
) -> None:
    acc, _ = producer(clock, {"compression.type": codec, "linger.ms": 0})
    sent = [
        SimpleRecord(b"k%d" % n, b"value %d " % n * 20, 1000 + n, [("h", b"x")]) for n in range(50)
    ]
    for r in sent:
        appended(add(acc, "t", r, num_partitions=1))
    [batch] = acc.drain([TP0])
    header, records = read_back(batch)
    assert header.magic == 2
    assert header.compression is CompressionType[codec.upper()]
    assert as_simple(records) == [
        SimpleRecord(r.key, r.value, r.timestamp, (("h", b"x"),)) for r in sent
    ]
    if codec != "none":
        assert len(batch.close()) < batch.uncompressed_records_bytes / 2


def test_compressed_batches_hold_more_records_once_the_ratio_is_learned(clock: FakeClock) -> None:
    props = {"compression.type": "gzip", "batch.size": 4000, "linger.ms": 60_000}
    acc, _ = producer(clock, props)
    counts = []
    for n in range(3000):
        appended(add(acc, "t", record(n, size=200), num_partitions=1))
        for batch in acc.drain([TP0]) if acc.ready().ready else []:
            batch.close()  # as the sender does, which teaches the ratio
            counts.append(batch.record_count)
            acc.deallocate(batch)
    assert counts[0] < counts[-1], counts[:3] + counts[-3:]
    assert counts[-1] > 4000 // 200  # far more than fit uncompressed


def test_a_batch_that_compressed_worse_than_estimated_is_split_within_max_request_size(
    clock: FakeClock,
) -> None:
    props = {"compression.type": "zstd", "batch.size": 200_000, "max.request.size": 20_000}
    acc, manager = producer(clock, props, idempotent=True)
    acc._ratio.ratio = 0.01  # as if every earlier batch had compressed 100:1
    rng = random.Random(9)
    sent = [SimpleRecord(None, rng.randbytes(1000), 5) for _ in range(60)]  # incompressible
    futures = []
    for r in sent:
        result = appended(add(acc, "t", r, num_partitions=1, partition=0))
        futures.append(RecordFuture(result.batch.result, result.record_index))
    acc.begin_flush()
    drained: list[ProducerBatch] = []
    while acc.has_undrained:
        for batch in acc.drain([TP0]):
            assert len(batch.close()) <= 20_000
            drained.append(batch)
            assert manager is not None
            manager.on_success(batch, 0)
    assert sum(b.record_count for b in drained) == 60
    assert [r for b in drained for r in as_simple(read_back(b)[1])] == sent
    # Each record's future follows it into the part that holds it.
    assert [f._batch.locate(f._index) for f in futures] == [
        (b.result, i) for b in drained for i in range(b.record_count)
    ]
    assert [b.base_sequence for b in drained] == [
        sum(b.record_count for b in drained[:i]) for i in range(len(drained))
    ]


# --- max.request.size ------------------------------------------------------------------


def test_a_record_larger_than_max_request_size_is_refused(clock: FakeClock) -> None:
    acc, _ = producer(clock, {"max.request.size": 1000})
    with pytest.raises(RecordTooLargeError) as raised:
        add(acc, "t", record(0, size=1000), num_partitions=1)
    assert raised.value.reason == "MESSAGE_TOO_LARGE"
    assert "max.request.size" in str(raised.value)


def _fill_partitions(acc: RecordAccumulator, count: int, records_each: int) -> list[TopicPartition]:
    """Topic ``t``'s ``count`` partitions, each given ``records_each`` records."""
    partitions = [TopicPartition("t", p) for p in range(count)]
    for tp in partitions:
        for n in range(records_each):
            appended(add(acc, "t", record(n), num_partitions=count, partition=tp.partition))
    return partitions


def test_one_drain_takes_one_batch_per_partition_within_max_request_size(
    clock: FakeClock,
) -> None:
    acc, _ = producer(clock, {"batch.size": 3000, "linger.ms": 0})
    partitions = _fill_partitions(acc, 6, records_each=40)
    drained = acc.drain(partitions, max_request_size=7000)
    assert len({b.topic_partition for b in drained}) == len(drained) == 2
    assert sum(len(b.close()) for b in drained) <= 7000
    # the next drain starts elsewhere, so no partition starves
    assert (
        acc.drain(partitions, max_request_size=7000)[0].topic_partition
        != drained[0].topic_partition
    )


def test_a_drain_takes_a_partitions_full_batches_together_within_max_request_size(
    clock: FakeClock,
) -> None:
    acc, _ = producer(clock, {"batch.size": 3000, "linger.ms": 1000})
    partitions = _fill_partitions(acc, 2, records_each=100)  # 3 full batches of 26, 1 open
    drained = acc.drain(partitions, max_request_size=100_000, batches_per_partition=100)
    order = [batch.topic_partition for batch in drained]
    assert order == sorted(order, key=order.index)  # a partition's batches together
    for tp in partitions:
        batches = [batch for batch in drained if batch.topic_partition == tp]
        assert len(batches) == 3 and all(batch.is_full for batch in batches)
        values = [r.value for batch in batches for r in read_back(batch)[1]]
        assert values == [record(n).value for n in range(len(values))]  # in order
        assert len(acc._queues[tp]) == 1  # the open batch lingers on
    capped, _ = producer(clock, {"batch.size": 3000, "linger.ms": 1000})
    for n in range(100):
        appended(add(capped, "t", record(n), num_partitions=1, partition=0))
    first = capped.drain(partitions[:1], max_request_size=7000, batches_per_partition=100)
    assert len(first) == 2 and sum(len(batch.close()) for batch in first) <= 7000


# --- a record the encoder fails on ------------------------------------------------------


def test_a_record_that_fails_to_encode_leaves_the_open_batch_as_it_was(clock: FakeClock) -> None:
    acc, _ = producer(clock, {"linger.ms": 60_000})
    appended(add(acc, "t", record(0), num_partitions=1))
    bad = SimpleRecord(key=b"k", value="a str", timestamp=1001)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        add(acc, "t", bad, num_partitions=1)  # fails after the record's first bytes
    appended(add(acc, "t", record(2), num_partitions=1))
    [batch] = acc.drain([TP0])
    _header, records = read_back(batch)
    assert as_simple(records) == [record(0), record(2)]


def test_a_record_that_fails_to_encode_opens_no_batch(clock: FakeClock) -> None:
    acc, _ = producer(clock, {"linger.ms": 60_000})
    free = acc.free_memory_bytes
    bad = SimpleRecord(key=b"k", value="a str", timestamp=1000)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        add(acc, "t", bad, num_partitions=1)
    assert acc.queued(TP0) == () and acc.incomplete_batches == ()
    assert acc.free_memory_bytes == free


# --- buffer.memory ---------------------------------------------------------------------


def test_a_full_buffer_blocks_then_times_out_after_max_block_ms(clock: FakeClock) -> None:
    props = {"buffer.memory": 40_000, "batch.size": 16384, "max.block.ms": 1000}
    acc, _ = producer(clock, props)
    appended(add(acc, "t", record(0), num_partitions=3, partition=0))
    appended(add(acc, "t", record(1), num_partitions=3, partition=1))
    assert acc.free_memory_bytes == 40_000 - 2 * 16384
    blocked = add(acc, "t", record(2), num_partitions=3, partition=2)
    assert blocked == MemoryBlocked(clock.now_ms + 1000, 16384)
    # while someone waits for memory, every partition is ready: no lingering
    assert acc.ready().ready == {TopicPartition("t", 0), TopicPartition("t", 1)}
    clock.advance(999)
    assert isinstance(
        add(acc, "t", record(2), num_partitions=3, partition=2, deadline_ms=blocked.deadline_ms),
        MemoryBlocked,
    )
    clock.advance(1)
    with pytest.raises(BufferExhaustedError) as raised:
        add(acc, "t", record(2), num_partitions=3, partition=2, deadline_ms=blocked.deadline_ms)
    assert isinstance(raised.value, TimeoutError)
    assert "max blocking time 1000 ms" in str(raised.value)


def test_memory_comes_back_when_a_batch_is_deallocated_not_when_drained(
    clock: FakeClock,
) -> None:
    props = {"buffer.memory": 20_000, "batch.size": 16384, "linger.ms": 0}
    acc, _ = producer(clock, props)
    appended(add(acc, "t", record(0), num_partitions=1))
    [in_flight] = acc.drain([TP0])
    blocked = add(acc, "t", record(1), num_partitions=1)
    assert isinstance(blocked, MemoryBlocked)  # in flight still holds its memory
    acc.deallocate(in_flight)
    acc.deallocate(in_flight)  # twice is harmless
    assert acc.free_memory_bytes == 20_000
    result = add(acc, "t", record(1), num_partitions=1, deadline_ms=blocked.deadline_ms)
    assert isinstance(result, AppendResult)
    assert acc.ready().next_check_delay_ms == 0


def test_a_record_larger_than_buffer_memory_is_refused(clock: FakeClock) -> None:
    acc, _ = producer(clock, {"buffer.memory": 1000})
    with pytest.raises(RecordTooLargeError, match=r"buffer\.memory"):
        add(acc, "t", record(0, size=2000), num_partitions=1)


# --- retries and expiry -----------------------------------------------------------------


def test_a_retry_waits_its_backoff_growing_exponentially(clock: FakeClock) -> None:
    acc, _ = producer(clock, {"linger.ms": 0, "retry.backoff.ms": 100, "retry.backoff.max.ms": 250})
    appended(add(acc, "t", record(0), num_partitions=1))
    [batch] = acc.drain([TP0])
    for backoff in (100, 200, 250, 250):
        acc.reenqueue(batch)
        assert acc.ready().ready == frozenset() and acc.drain([TP0]) == []
        assert acc.ready().next_check_delay_ms == backoff
        clock.advance(backoff)
        assert acc.drain([TP0]) == [batch]


def test_queued_batches_expire_after_delivery_timeout_ms(clock: FakeClock) -> None:
    acc, _ = producer(clock, {"linger.ms": 10, "delivery.timeout.ms": 40_000})
    appended(add(acc, "t", record(0), num_partitions=1))
    clock.advance(39_999)
    assert acc.expired_batches() == []
    clock.advance(1)
    [expired] = acc.expired_batches()
    assert expired.record_count == 1 and not acc.has_undrained
    acc.deallocate(expired)
    assert acc.incomplete_batches == ()


# --- the invariants, over arbitrary producers -------------------------------------------

appends = st.tuples(
    st.just("append"),
    st.integers(1, 80),  # how many records
    st.one_of(st.none(), st.integers(0, 3)),  # one partition, or each in turn
    st.integers(0, 3000),  # the largest value size: sizes cycle up to it
    st.booleans(),  # keyed
)
operations = st.lists(
    st.one_of(
        appends,
        st.tuples(st.just("tick"), st.integers(0, 30)),
        st.tuples(st.just("drain"), st.integers(1, 6)),  # requests sent before answers
        st.tuples(st.just("answer"), st.sampled_from(["ok", "retry", "lost"])),
        st.tuples(st.just("flush")),
    ),
    min_size=3,
    max_size=50,
)


@settings(
    max_examples=int(os.environ.get("HYPOTHESIS_CLIENT_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    ops=operations,
    codec=st.sampled_from(["none", "gzip", "lz4", "snappy", "zstd"]),
    batch_size=st.sampled_from([0, 500, 4096, 16384]),
    max_request_size=st.sampled_from([4000, 16384, 1 << 20]),
    linger_ms=st.sampled_from([0, 5, 50]),
)
def test_every_record_comes_out_once_in_order_in_batches_within_limits(
    ops: list[tuple[object, ...]],
    codec: str,
    batch_size: int,
    max_request_size: int,
    linger_ms: int,
) -> None:
    """A model producer over the accumulator and the idempotence bookkeeping: records
    appended in any order of ticks, drains, acks and retries come out stored exactly
    once, in append order per partition, in batches within max.request.size (or of a
    single record), with contiguous sequences per partition and all memory returned."""
    clock = FakeClock()
    props = {
        "compression.type": codec,
        "batch.size": batch_size,
        "max.request.size": max_request_size,
        "linger.ms": linger_ms,
        "buffer.memory": 64 * 1024,
    }
    acc, manager = producer(clock, props, idempotent=True)
    assert manager is not None
    partitions = [TopicPartition("t", p) for p in range(4)]
    expected: dict[TopicPartition, list[SimpleRecord]] = defaultdict(list)
    stored: dict[TopicPartition, list[SimpleRecord]] = defaultdict(list)
    in_flight: list[ProducerBatch] = []
    next_value = 0

    broker_next: dict[TopicPartition, int] = defaultdict(int)
    broker_recent: dict[TopicPartition, list[tuple[int, int]]] = defaultdict(list)

    def broker_append(batch: ProducerBatch) -> str:
        """The broker's sequence check over the stored batch bytes."""
        header, records = read_back(batch)
        tp = batch.topic_partition
        assert (header.producer_id, header.producer_epoch) == (1000, 0)
        if header.base_sequence == broker_next[tp]:
            stored[tp] += as_simple(records)
            broker_next[tp] = (header.base_sequence + header.record_count) % 2**31
            broker_recent[tp] = [*broker_recent[tp][-4:], (header.base_sequence, len(records))]
            return "NONE"
        if (header.base_sequence, len(records)) in broker_recent[tp]:
            return "DUPLICATE"  # answered from the broker's cache of the last 5
        return "OUT_OF_ORDER_SEQUENCE_NUMBER"

    def drain() -> None:
        for batch in acc.drain(partitions):
            assert len(batch.close()) <= max_request_size or batch.record_count == 1
            in_flight.append(batch)

    def answer(outcome: str) -> None:
        """Answer every request in flight, oldest first: ``retry`` loses the first
        request before the broker sees it, ``lost`` loses the first answer after the
        broker stored the batch."""
        assert manager is not None
        while in_flight:
            batch = in_flight.pop(0)
            if outcome == "retry":
                outcome = "ok"
                assert manager.can_retry(batch, "NETWORK_EXCEPTION")
                acc.reenqueue(batch)
                continue
            error = broker_append(batch)
            event(f"broker answered {error}")
            if error == "OUT_OF_ORDER_SEQUENCE_NUMBER":
                assert manager.can_retry(batch, error)  # an earlier retry fills the gap
                acc.reenqueue(batch)
                continue
            if outcome == "lost":
                outcome = "ok"
                assert manager.can_retry(batch, "REQUEST_TIMED_OUT")
                acc.reenqueue(batch)
                continue
            manager.on_success(batch, None if error == "DUPLICATE" else 0)
            acc.deallocate(batch)
        assert not manager.epoch_bump_required

    def append(r: SimpleRecord, partition: int) -> None:
        result = add(acc, "t", r, num_partitions=4, partition=partition)
        if isinstance(result, MemoryBlocked):
            event("an append waited for buffer.memory")
        while isinstance(result, MemoryBlocked):
            answer("ok")  # the sidecar catches up, memory comes back
            clock.advance(1000)
            drain()
            answer("ok")
            result = add(
                acc, "t", r, num_partitions=4, partition=partition, deadline_ms=result.deadline_ms
            )
        expected[TopicPartition("t", partition)].append(r)

    for op in ops:
        if op[0] == "append":
            _, count, partition, max_size, keyed = op
            assert isinstance(count, int) and isinstance(max_size, int)
            for i in range(count):
                size = (i * 397) % (max_size + 1)
                value = next_value.to_bytes(4, "big") * (size // 4 + 1)
                r = SimpleRecord(b"key" if keyed else None, value, clock.now_ms)
                next_value += 1
                append(r, i % 4 if partition is None else int(str(partition)))
        elif op[0] == "tick":
            assert isinstance(op[1], int)
            clock.advance(op[1])
        elif op[0] == "drain":
            for _ in range(int(str(op[1]))):
                drain()
        elif op[0] == "answer":
            assert isinstance(op[1], str)
            answer(op[1])
        else:
            acc.begin_flush()
            drain()
            answer("ok")
            acc.end_flush()
    acc.close()
    while acc.has_undrained or in_flight:
        clock.advance(10_000)
        drain()
        answer("ok")
    assert stored == expected
    event(f"records: {min(sum(map(len, expected.values())) // 20 * 20, 100)}+")
    for tp in partitions:
        assert manager.next_sequence(tp) == len(expected[tp])
        assert manager.in_flight(tp) == ()
    assert acc.free_memory_bytes == 64 * 1024
    assert acc.incomplete_batches == ()
