"""The broker-wide budget of decompressed bytes: room is shared, waited for, given back."""

from __future__ import annotations

import threading

import pytest

from tierlog.storage.errors import RecordTooLargeError, ThrottlingQuotaExceededError
from tierlog.storage.records.inflight import TRIM_AFTER_BYTES, DecompressedBytesBudget

MiB = 1024 * 1024


def test_a_reservation_waits_for_another_to_end_and_then_holds_its_room() -> None:
    budget = DecompressedBytesBudget(10 * MiB, 30_000)
    first = budget.reserve(8 * MiB)
    granted = threading.Event()

    def second() -> None:
        with budget.reserve(4 * MiB):
            granted.set()

    waiter = threading.Thread(target=second)
    waiter.start()
    with budget._room:  # the waiter is in line, not through
        while budget.waiting == 0:
            budget._room.wait(1)
    assert not granted.is_set()
    with first:
        pass
    waiter.join(30)
    assert granted.is_set() and budget.used_bytes == 0 and budget.refused == 0


def test_growing_past_the_whole_budget_is_too_large_and_waiting_too_long_is_throttled() -> None:
    budget = DecompressedBytesBudget(10 * MiB, 20)
    with budget.reserve(6 * MiB) as held:
        with pytest.raises(RecordTooLargeError):
            held.grow_to(11 * MiB)
        with pytest.raises(ThrottlingQuotaExceededError):
            budget.reserve(5 * MiB)
        held.grow_to(10 * MiB)
        assert budget.used_bytes == 10 * MiB
    assert (budget.used_bytes, budget.refused) == (0, 1)


def test_the_heap_is_trimmed_once_a_burst_is_over() -> None:
    budget = DecompressedBytesBudget(TRIM_AFTER_BYTES, 0)
    with budget.reserve(TRIM_AFTER_BYTES // 2), budget.reserve(TRIM_AFTER_BYTES // 2):
        pass
    assert budget.trims == 1
    for _ in range(100):  # one validation after another is no burst: no pages churned
        with budget.reserve(3 * MiB):
            pass
    assert budget.trims == 1
