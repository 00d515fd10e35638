"""The cleaner's offset map: latest offset per full key, within a memory budget."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from tierlog.storage.offset_map import OffsetMap, key_cost_bytes


def test_the_latest_offset_of_each_key_wins_and_absent_keys_say_minus_one() -> None:
    offsets = OffsetMap(1 << 20)
    offsets.put(b"a", 1)
    offsets.put(b"b", 2)
    offsets.put(b"a", 3)
    assert (offsets.get(b"a"), offsets.get(b"b"), offsets.get(b"c")) == (3, 2, -1)
    assert len(offsets) == 2
    assert offsets.latest_offset == 3
    offsets.clear()
    assert (len(offsets), offsets.memory_bytes, offsets.latest_offset) == (0, 0, -1)


def test_keys_are_compared_in_full_so_no_two_keys_ever_share_an_entry() -> None:
    # SkimpyOffsetMap keeps a 16-byte digest: keys equal in their digest's bytes would
    # share a slot. Here even keys sharing every byte but one stay apart.
    offsets = OffsetMap(1 << 20)
    keys = [bytes(4096) + bytes([i]) for i in range(256)]
    for offset, key in enumerate(keys):
        offsets.put(key, offset)
    assert [offsets.get(key) for key in keys] == list(range(256))


def test_only_new_keys_cost_memory_and_the_budget_is_what_fits() -> None:
    key = b"k" * 100
    offsets = OffsetMap(3 * key_cost_bytes(key))
    offsets.put(key, 1)
    offsets.put(key, 2)
    assert offsets.memory_bytes == key_cost_bytes(key)
    assert offsets.fits(2 * key_cost_bytes(key))
    assert not offsets.fits(3 * key_cost_bytes(key))


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        OffsetMap(0)


@pytest.mark.parametrize("count", [1_000, 20_000, 100_000])
def test_the_accounted_memory_never_undercounts_what_the_process_allocates(count: int) -> None:
    keys = [os.urandom(100) for _ in range(count)]
    offsets = OffsetMap(1 << 40)
    tracemalloc.start()
    try:
        for offset, key in enumerate(keys, start=10**9):
            offsets.put(bytes(bytearray(key)), offset)  # a fresh copy, as decoding gives
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= offsets.memory_bytes <= 2 * peak
