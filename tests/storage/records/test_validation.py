"""Produce validation: each bad batch gets its typed error and the input is left as it came."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.lying_batches import LIES, framed_batch, honest_records, lying_batch
from tierlog.storage.config import TimestampType
from tierlog.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    ThrottlingQuotaExceededError,
    TierlogError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from tierlog.storage.records import (
    CompressionType,
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
    build_legacy_message_set,
    crc32c,
    decode_records,
    validate_produce,
)
from tierlog.storage.records.batch import RECORDS_OFFSET
from tierlog.storage.records.inflight import DecompressedBytesBudget, ValidationWouldWait
from tierlog.storage.records.record import encode_record

NOW = 1_700_000_000_000
HOUR = 3_600_000


def _validate(buf: bytes | bytearray | memoryview, **overrides: Any) -> list[Any]:
    options: dict[str, Any] = {
        "max_message_bytes": 1024 * 1024 + 12,
        "require_keys": False,
        "timestamp_type": TimestampType.CREATE_TIME,
        "now_ms": NOW,
        "before_max_ms": 2**63 - 1,
        "after_max_ms": HOUR,
    }
    options.update(overrides)
    return validate_produce(buf, **options)


def _batch(count: int = 3, **kwargs: Any) -> bytes:
    return build_batch([SimpleRecord(b"k%d" % i, b"v" * 20, NOW) for i in range(count)], **kwargs)


def _edit(batch: bytes, change: Callable[[bytearray], None], *, fix_crc: bool = True) -> bytearray:
    buf = bytearray(batch)
    change(buf)
    if fix_crc:
        struct.pack_into(">I", buf, 17, crc32c(buf[21:]))
    return buf


def _rejects(error: type[TierlogError], buf: bytes | bytearray, **overrides: Any) -> None:
    before = bytes(buf)
    with pytest.raises(error):
        _validate(buf, **overrides)
    assert bytes(buf) == before


def test_valid_batches_come_back_as_headers_and_untouched() -> None:
    buf = bytearray(_batch(3) + _batch(2, compression=CompressionType.ZSTD))
    before = bytes(buf)
    headers = _validate(memoryview(buf))
    assert [(h.position, h.record_count) for h in headers] == [(0, 3), (headers[0].size, 2)]
    assert bytes(buf) == before


def test_empty_request_is_invalid() -> None:
    _rejects(InvalidRecordError, b"")


def test_trailing_garbage_and_truncation_are_corrupt() -> None:
    batch = _batch()
    _rejects(CorruptRecordError, batch + b"\x00\x01\x02")
    _rejects(CorruptRecordError, batch[:-1])
    _rejects(CorruptRecordError, batch[:40])


def test_old_message_formats_are_unsupported_and_unknown_magic_corrupt() -> None:
    for magic in (0, 1):
        legacy = build_legacy_message_set([SimpleRecord(b"k", b"v", NOW)], magic=magic)
        _rejects(UnsupportedForMessageFormatError, legacy)
    _rejects(CorruptRecordError, _edit(_batch(), lambda b: b.__setitem__(16, 3)))


def test_bad_crc_is_corrupt() -> None:
    _rejects(
        CorruptRecordError, _edit(_batch(), lambda b: b.__setitem__(70, b[70] ^ 1), fix_crc=False)
    )


def test_batch_size_below_the_header_is_corrupt() -> None:
    _rejects(CorruptRecordError, _edit(_batch(), lambda b: struct.pack_into(">i", b, 8, 40)))


def test_produced_batches_start_at_offset_zero() -> None:
    _rejects(InvalidRecordError, _batch(base_offset=5))


def test_oversized_batch_is_too_large() -> None:
    batch = _batch()
    _rejects(RecordTooLargeError, batch, max_message_bytes=len(batch) - 1)
    assert _validate(batch, max_message_bytes=len(batch))


def test_unknown_codec_is_unsupported_unless_the_crc_says_corrupt() -> None:
    unknown = _edit(_batch(), lambda b: b.__setitem__(22, 0x06))
    _rejects(UnsupportedCompressionTypeError, unknown)
    garbled = _edit(_batch(), lambda b: b.__setitem__(22, 0x06), fix_crc=False)
    _rejects(CorruptRecordError, garbled)


@pytest.mark.parametrize(
    ("count", "last_offset_delta"),
    [(0, -1), (0, 0), (-1, 2), (4, 2), (2, 2), (3, -5)],
)
def test_record_count_must_match_the_offset_deltas(count: int, last_offset_delta: int) -> None:
    def change(buf: bytearray) -> None:
        struct.pack_into(">i", buf, 57, count)
        struct.pack_into(">i", buf, 23, last_offset_delta)

    _rejects(InvalidRecordError, _edit(_batch(3), change))


def test_uncompressed_count_must_fit_the_bytes_at_the_smallest_record_size() -> None:
    def change(buf: bytearray) -> None:
        struct.pack_into(">i", buf, 57, 1000)
        struct.pack_into(">i", buf, 23, 999)

    _rejects(InvalidRecordError, _edit(_batch(3), change))


def test_producers_may_not_write_control_batches() -> None:
    marker = build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.COMMIT, 1),
        producer_id=1,
        producer_epoch=0,
        timestamp_ms=NOW,
    )
    _rejects(InvalidRecordError, marker)


@pytest.mark.parametrize(
    "producer",
    [
        {"producer_id": 5, "producer_epoch": 0, "base_sequence": -1},
        {"producer_id": 5, "producer_epoch": -1, "base_sequence": 0},
        {"producer_id": -2},
        {"is_transactional": True},
    ],
)
def test_producer_fields_must_agree(producer: dict[str, Any]) -> None:
    _rejects(InvalidRecordError, _batch(**producer))


def test_idempotent_and_transactional_batches_pass() -> None:
    assert _validate(_batch(producer_id=5, producer_epoch=0, base_sequence=0))
    assert _validate(
        _batch(producer_id=5, producer_epoch=0, base_sequence=9, is_transactional=True)
    )


def test_create_time_must_lie_within_the_topic_bounds() -> None:
    future = build_batch([SimpleRecord(b"k", b"v", NOW + HOUR + 1)])
    _rejects(InvalidTimestampError, future)
    old = build_batch([SimpleRecord(b"k", b"v", NOW - 10 * HOUR)])
    _rejects(InvalidTimestampError, old, before_max_ms=HOUR)
    assert _validate(old)
    # The first record's timestamp is checked even when it is not the max.
    mixed = build_batch([SimpleRecord(b"k", b"v", NOW - 10 * HOUR), SimpleRecord(b"k", b"v", NOW)])
    _rejects(InvalidTimestampError, mixed, before_max_ms=HOUR)


def test_records_without_timestamps_pass_the_bounds() -> None:
    assert _validate(build_batch([SimpleRecord(b"k", b"v")]), before_max_ms=0, after_max_ms=0)


def test_log_append_time_topics_do_not_bound_producer_timestamps() -> None:
    future = build_batch([SimpleRecord(b"k", b"v", NOW + 100 * HOUR)])
    assert _validate(future, timestamp_type=TimestampType.LOG_APPEND_TIME)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_compacted_topics_need_a_key_on_every_record(codec: CompressionType) -> None:
    records = [SimpleRecord(b"k", b"v", NOW), SimpleRecord(None, b"v", NOW)]
    keyless = build_batch(records, compression=codec)
    assert _validate(keyless)  # keys are only looked at on compacted topics
    _rejects(InvalidRecordError, keyless, require_keys=True)
    assert _validate(_batch(compression=codec), require_keys=True)


@pytest.mark.parametrize("require_keys", [False, True])
def test_every_record_timestamp_is_bounded(require_keys: bool) -> None:
    mixed = build_batch(
        [
            SimpleRecord(b"a", b"v", NOW),
            SimpleRecord(b"b", b"v", NOW - 10 * HOUR),  # neither the first nor the max
            SimpleRecord(b"c", b"v", NOW),
        ]
    )
    _rejects(InvalidTimestampError, mixed, before_max_ms=HOUR, require_keys=require_keys)
    assert _validate(mixed, before_max_ms=11 * HOUR, require_keys=require_keys)


def test_one_bad_batch_fails_the_whole_request() -> None:
    good = _batch()
    bad = _edit(_batch(), lambda b: b.__setitem__(70, b[70] ^ 1), fix_crc=False)
    _rejects(CorruptRecordError, good + bytes(bad))


# -- batches that lie about their records (the CRC is right, the records disagree) --


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda codec: codec.name)
@pytest.mark.parametrize("lie", sorted(LIES))
def test_batches_whose_records_lie_are_invalid(lie: str, codec: CompressionType) -> None:
    _rejects(InvalidRecordError, LIES[lie](codec))


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda codec: codec.name)
def test_honest_records_in_the_same_frame_pass(codec: CompressionType) -> None:
    (header,) = _validate(lying_batch(honest_records(3), record_count=3, compression=codec))
    assert header.record_count == 3


@pytest.mark.parametrize(
    "codec", [c for c in CompressionType if c is not CompressionType.NONE], ids=lambda c: c.name
)
def test_a_compressed_section_that_does_not_decompress_is_corrupt(codec: CompressionType) -> None:
    garbage = framed_batch(b"\x00not a compressed stream\xff" * 3, codec=codec)
    _rejects(CorruptRecordError, garbage)


@pytest.mark.parametrize("max_timestamp", [NOW - 1, NOW + 1, -1])
def test_the_max_timestamp_must_be_the_records_max(max_timestamp: int) -> None:
    # The time index is built from the header's max timestamp, and it is stored as it
    # came (Kafka rewrites it instead): one that disagrees with the records is refused.
    _rejects(
        InvalidRecordError,
        lying_batch(honest_records(3), record_count=3, max_timestamp=max_timestamp),
    )


def test_a_later_lying_batch_fails_the_whole_request() -> None:
    good = _batch()
    _rejects(InvalidRecordError, good + LIES["record length lies"](CompressionType.NONE))


_records = st.lists(
    st.builds(
        SimpleRecord,
        key=st.none() | st.binary(max_size=20),
        value=st.none() | st.binary(max_size=200),
        timestamp=st.integers(NOW - HOUR, NOW + HOUR),
        headers=st.lists(
            st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2
        ),
    ),
    min_size=1,
    max_size=20,
)
# Records laid out alike, as producers make them: long runs the validator checks in place.
_alike_records = st.builds(
    lambda count, value, step: [
        SimpleRecord(b"key", value, NOW + index // step, ()) for index in range(count)
    ],
    st.integers(2, 150),
    st.binary(min_size=0, max_size=30),
    st.integers(1, 50),
)


@settings(max_examples=300, deadline=None)
@given(
    records=_records | _alike_records,
    codec=st.sampled_from([CompressionType.NONE, CompressionType.LZ4]),
    data=st.data(),
)
def test_an_accepted_batch_is_one_every_reader_decodes(
    records: list[SimpleRecord], codec: CompressionType, data: st.DataObject
) -> None:
    """Damage any bytes of the records section, fix the CRC: the batch is either refused
    with a typed error or decodes to exactly the records it declares, offsets 0..n-1."""
    honest = build_batch(records, compression=codec)
    assert _validate(honest)
    damaged = bytearray(honest)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(RECORDS_OFFSET, len(damaged) - 1))
        damaged[position] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", damaged, 17, crc32c(damaged[21:]))
    try:
        (header,) = _validate(damaged)
    except (InvalidRecordError, CorruptRecordError, InvalidTimestampError):
        return
    decoded = decode_records(damaged, header)
    assert [record.offset for record in decoded] == list(range(header.record_count))
    assert max(record.timestamp for record in decoded) == header.max_timestamp
    assert all(record.timestamp <= NOW + HOUR for record in decoded)  # the topic's bound


# -- long runs of alike records: checked where they lie, not decoded one by one --


def _alike(
    count: int,
    *,
    offset_deltas: dict[int, int] | None = None,
    timestamp_deltas: dict[int, int] | None = None,
    keys: bool = True,
) -> bytearray:
    """``count`` records of one layout; the dicts change the deltas of chosen records."""
    out = bytearray()
    for index in range(count):
        encode_record(
            out,
            (offset_deltas or {}).get(index, index),
            (timestamp_deltas or {}).get(index, index // 1000),
            b"key-%06d" % index if keys else None,
            b"v" * 80,
        )
    return out


def _alike_batch(records: bytearray, count: int, codec: CompressionType, max_delta: int) -> bytes:
    return lying_batch(
        records, record_count=count, compression=codec, max_timestamp=NOW + max_delta
    )


@pytest.mark.parametrize(
    "codec", [CompressionType.NONE, CompressionType.ZSTD], ids=lambda c: c.name
)
@pytest.mark.parametrize("count", [2, 64, 65, 8192, 9000])
def test_long_runs_of_honest_records_pass(codec: CompressionType, count: int) -> None:
    batch = _alike_batch(_alike(count), count, codec, (count - 1) // 1000)
    (header,) = _validate(batch, require_keys=True, before_max_ms=HOUR)
    assert header.record_count == count


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4], ids=lambda c: c.name)
@pytest.mark.parametrize("swapped", [0, 1, 2, 62, 63, 100, 4000, 8190, 8191, 8500])
def test_swapped_offset_deltas_inside_a_run_are_invalid(
    codec: CompressionType, swapped: int
) -> None:
    count = 9000
    records = _alike(count, offset_deltas={swapped: swapped + 1, swapped + 1: swapped})
    _rejects(InvalidRecordError, _alike_batch(records, count, codec, 8))


@pytest.mark.parametrize("shift", [0, 200], ids=["one-byte deltas", "two-byte deltas"])
@pytest.mark.parametrize("at", [1, 100, 5000])
def test_a_timestamp_inside_a_run_is_bounded_and_counts_for_the_max(shift: int, at: int) -> None:
    count = 6000
    usual = {index: shift + index // 1000 for index in range(count)}
    newest = shift + (count - 1) // 1000

    def batch(deviant: int, max_delta: int) -> bytes:
        records = _alike(count, timestamp_deltas={**usual, at: shift + deviant})
        return _alike_batch(records, count, CompressionType.NONE, max_delta)

    early = batch(-60, newest)  # alike still: the deviant delta has the others' width
    _rejects(InvalidTimestampError, early, before_max_ms=30 - shift)
    assert _validate(early, before_max_ms=HOUR)
    _rejects(InvalidRecordError, batch(60, newest))  # the header's max is not the records'
    assert _validate(batch(60, shift + 60))


def test_a_run_of_keyless_records_is_refused_on_compacted_topics() -> None:
    batch = _alike_batch(_alike(500, keys=False), 500, CompressionType.NONE, 0)
    assert _validate(batch)
    _rejects(InvalidRecordError, batch, require_keys=True)


@pytest.mark.parametrize(
    "codec",
    [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD],
    ids=lambda codec: codec.name,
)
def test_a_batch_that_decompresses_past_the_bound_is_too_large(codec: CompressionType) -> None:
    # 64 x max.message.bytes: here 10,000 bytes on the wire may decode to 640,000.
    bomb = build_batch([SimpleRecord(b"k", bytes(700_000), NOW)], compression=codec)
    assert len(bomb) < 10_000
    _rejects(RecordTooLargeError, bomb, max_message_bytes=10_000)
    assert _validate(bomb, max_message_bytes=11_000)


# -- compressed sections are checked as they decode, a chunk at a time --


def _verdict(buf: bytes | bytearray, budget: DecompressedBytesBudget) -> object:
    try:
        return [(h.position, h.record_count) for h in _validate(buf, budget=budget)]
    except TierlogError as error:
        return type(error)


@settings(max_examples=300, deadline=None)
@given(
    records=_records | _alike_records,
    codec=st.sampled_from(
        [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]
    ),
    chunk_bytes=st.integers(1, 300),
    data=st.data(),
)
def test_a_section_streamed_in_small_chunks_gets_the_verdict_of_a_whole_one(
    records: list[SimpleRecord], codec: CompressionType, chunk_bytes: int, data: st.DataObject
) -> None:
    """Records cut by chunk ends anywhere (and longer than a chunk) are checked alike."""
    section = bytearray(build_batch(records)[RECORDS_OFFSET:])
    count = len(records)
    for _ in range(data.draw(st.integers(0, 3))):
        position = data.draw(st.integers(0, len(section) - 1))
        section[position] = data.draw(st.integers(0, 255))
    highest = max(record.timestamp for record in records)
    batch = lying_batch(section, record_count=count, compression=codec, max_timestamp=highest)
    whole = DecompressedBytesBudget(2**40, 0, chunk_bytes=2**30)
    small = DecompressedBytesBudget(2**40, 0, chunk_bytes=chunk_bytes)
    assert _verdict(batch, small) == _verdict(batch, whole)
    assert small.used_bytes == 0


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.ZSTD], ids=str)
def test_a_record_longer_than_the_budget_is_too_large_before_it_is_decoded(
    codec: CompressionType,
) -> None:
    # A record claiming 2 GiB - 1 within a 64 x 100 MB bound, cut by the first chunk:
    # refused on its length alone.  (A section that ends first is INVALID_RECORD.)
    section = bytearray(b"\xfe\xff\xff\xff\x0f") + bytes(2 * 1024 * 1024)
    bomb = lying_batch(section, record_count=1, compression=codec)
    budget = DecompressedBytesBudget(64 * 1024 * 1024, 0)
    with pytest.raises(RecordTooLargeError, match="decompressed bytes at once"):
        _validate(bomb, max_message_bytes=100_000_000, budget=budget)
    assert budget.used_bytes == 0


def test_validations_wait_for_room_in_the_budget_then_are_throttled() -> None:
    # A validation holds three chunks and its decoder's window (deflate's 32 KiB).
    budget = DecompressedBytesBudget(4 * 1024 * 1024, 50, chunk_bytes=1024 * 1024)
    batch = _batch(3, compression=CompressionType.GZIP)
    with budget.reserve(1024 * 1024):
        with pytest.raises(ThrottlingQuotaExceededError):
            _validate(batch, budget=budget)
        assert budget.refused == 1
    assert _validate(batch, budget=budget)
    assert budget.used_bytes == 0


def test_a_caller_that_may_not_wait_is_told_to_go_where_it_may() -> None:
    # An event loop validates in place only what decodes quickly and finds room now.
    budget = DecompressedBytesBudget(16 * 1024 * 1024, 30_000)
    small = _batch(3, compression=CompressionType.ZSTD)
    large = build_batch(
        [SimpleRecord(b"k%d" % i, bytes(100_000), NOW) for i in range(30)],
        compression=CompressionType.ZSTD,
    )
    assert _validate(small, budget=budget, may_wait=False)
    with pytest.raises(ValidationWouldWait):
        _validate(large, budget=budget, may_wait=False)
    assert _validate(large, budget=budget)
    with budget.reserve(15 * 1024 * 1024):
        with pytest.raises(ValidationWouldWait):
            _validate(small, budget=budget, may_wait=False)
        assert budget.refused == 0
    assert budget.used_bytes == 0
