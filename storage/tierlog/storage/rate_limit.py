"""A token bucket that holds a process's background I/O to a byte rate.

Background work must not starve the produce path of network or disk bandwidth. Every
upload attempt of the S3 store draws its bytes from one bucket before it sends them
(all parts of all concurrent uploads, and retries too: they use the link as well); the
log cleaner's threads and the tier's cleaner draw what they read and write from another
(``log.cleaner.io.max.bytes.per.second``, Kafka's cleaner throttle).

The bucket may go into debt: a caller asking for more than is available takes it all
and sleeps until the debt is paid back at the rate. So a request bigger than the
burst (a whole part) still passes, and over any stretch the bytes sent stay within
``rate * elapsed + burst``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    def __init__(
        self,
        rate_bytes_per_s: float,
        burst_bytes: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if rate_bytes_per_s <= 0:
            raise ValueError(f"rate must be positive, got {rate_bytes_per_s}")
        self.rate_bytes_per_s = rate_bytes_per_s
        self.burst_bytes = rate_bytes_per_s if burst_bytes is None else burst_bytes
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = self.burst_bytes
        self._updated = clock()

    def acquire(self, n_bytes: int) -> float:
        """Take ``n_bytes``, sleeping while the bucket is in debt; returns the wait."""
        with self._lock:
            now = self._clock()
            refill = (now - self._updated) * self.rate_bytes_per_s
            self._tokens = min(self.burst_bytes, self._tokens + refill) - n_bytes
            self._updated = now
            wait_s = max(0.0, -self._tokens / self.rate_bytes_per_s)
        if wait_s:
            self._sleep(wait_s)
        return wait_s
