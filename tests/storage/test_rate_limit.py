from __future__ import annotations

import threading

from tierlog.storage.rate_limit import TokenBucket


class FakeClock:
    """Time that moves only when someone sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_burst_passes_at_once_then_bytes_flow_at_the_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1000, burst_bytes=500, clock=clock, sleep=clock.sleep)
    assert bucket.acquire(500) == 0
    for _ in range(10):
        bucket.acquire(100)
    assert clock.now == 1.0  # 1000 bytes beyond the burst at 1000 bytes/s


def test_a_request_bigger_than_the_burst_passes_and_pays_its_debt() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1000, burst_bytes=100, clock=clock, sleep=clock.sleep)
    assert bucket.acquire(2100) == 2.0
    assert bucket.acquire(1000) == 1.0


def test_idle_time_refills_no_more_than_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1000, burst_bytes=100, clock=clock, sleep=clock.sleep)
    clock.now = 60.0
    assert bucket.acquire(100) == 0
    assert bucket.acquire(1000) == 1.0


def test_concurrent_callers_queue_behind_each_others_debt() -> None:
    clock = FakeClock()  # frozen: nobody's sleep moves it, so only the debt decides
    bucket = TokenBucket(1000, burst_bytes=0, clock=clock, sleep=lambda _seconds: None)
    waits: list[float] = []
    threads = [threading.Thread(target=lambda: waits.append(bucket.acquire(500))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(waits) == [0.5, 1.0, 1.5, 2.0]
