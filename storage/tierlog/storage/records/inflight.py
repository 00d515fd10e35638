"""A broker-wide bound on the decompressed bytes that produce validation holds at once.

A compressed batch is validated through a window on its decoded records (a chunk or
two, ``validation``), and a record longer than a chunk is gathered whole, as Kafka's
decompressing iterator reads a record whole: one batch holds little, but a record can
be as long as ``MAX_DECOMPRESSION_RATIO * max.message.bytes``, and many producers
validate at once.  Every validation of a compressed batch reserves what its window
and its decoder hold from one ``DecompressedBytesBudget``
(``tierlog.validation.max.inflight.decompressed.bytes``), and grows its reservation
before it gathers a long record, so the total stays under the budget.

A reservation that does not fit waits for others to end, at most ``max_wait_ms``
(``tierlog.queued.max.wait.ms``, the wait of the other in-flight budgets), then fails
with THROTTLING_QUOTA_EXCEEDED, which a producer retries; a record longer than the
whole budget can never be validated here and is MESSAGE_TOO_LARGE at once.  Waiting
is a thread's: a caller that may not wait (an event loop) validates with
``may_wait=False``, and a batch that would wait for room, or decodes to more than
``INLINE_DECODED_BYTES``, raises ``ValidationWouldWait`` for it to go to a thread.

After a burst, the memory goes back to the system: glibc keeps what its per-thread
arenas freed for reuse, and a burst of validations on several threads left the
sidecar's resident memory where the burst took it.  When the budget falls idle after
having held ``TRIM_AFTER_BYTES`` or more at once since it last did this (several
validations together, or a long record), it asks glibc to give its free pages back
(``malloc_trim``; elsewhere nothing is done).  Not after every validation: pages given
back are faulted in again by the next (trimming whenever 16 MiB had been reserved in
all cost lz4 produce a further 0.3 ms of sidecar CPU per MiB).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable
from types import TracebackType

from tierlog.storage.errors import RecordTooLargeError, ThrottlingQuotaExceededError

__all__ = [
    "BUDGET_KEY",
    "CHUNK_BYTES",
    "INLINE_DECODED_BYTES",
    "TRIM_AFTER_BYTES",
    "DecompressedBytesBudget",
    "Reservation",
    "ValidationWouldWait",
]

BUDGET_KEY = "tierlog.validation.max.inflight.decompressed.bytes"

# A compressed section is decoded and walked this much at a time.
CHUNK_BYTES = 1024 * 1024

# What a validation that may not wait decodes of a batch at most: a producer's batch
# (batch.size 16 KiB to 1 MiB, a few times that decoded), a millisecond or two of work.
INLINE_DECODED_BYTES = 2 * CHUNK_BYTES

# Held at once, this much makes a burst worth a trim of the heap once it is over: more
# than a few validations' windows (three chunks each).
TRIM_AFTER_BYTES = 16 * CHUNK_BYTES


def _heap_trimmer() -> Callable[[], None]:
    """glibc's ``malloc_trim(0)``, or nothing where there is no glibc."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is None:
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0) and None


_trim_heap = _heap_trimmer()


class ValidationWouldWait(Exception):
    """A validation that may not wait would: for room in the budget, or while it decodes
    more than ``INLINE_DECODED_BYTES``.  Nothing was appended; run it where it may wait."""


class DecompressedBytesBudget:
    """``capacity_bytes`` of decompressed records, shared by every validation of a broker,
    each of which decodes ``chunk_bytes`` at a time."""

    def __init__(
        self, capacity_bytes: int, max_wait_ms: int, *, chunk_bytes: int = CHUNK_BYTES
    ) -> None:
        self.capacity_bytes = capacity_bytes
        self.max_wait_ms = max_wait_ms
        self.chunk_bytes = chunk_bytes
        self.used_bytes = 0
        self.waiting = 0  # validations waiting for room
        self.refused = 0  # reservations that timed out
        self.trims = 0  # heap trims after bursts
        self._peak_since_trim = 0  # the most held at once since the last trim
        self._room = threading.Condition()

    def reserve(self, size_bytes: int, *, may_wait: bool = True) -> Reservation:
        """A reservation of ``size_bytes``, held until it is closed (``with``)."""
        reservation = Reservation(self, may_wait)
        reservation.grow_to(size_bytes)
        return reservation

    def _take(self, more_bytes: int, total_bytes: int, may_wait: bool) -> None:
        if total_bytes > self.capacity_bytes:
            raise RecordTooLargeError(
                f"validating this batch needs {total_bytes} decompressed bytes at once, more "
                f"than {BUDGET_KEY}={self.capacity_bytes}"
            )
        if not may_wait:
            with self._room:
                if self.used_bytes + more_bytes > self.capacity_bytes:
                    raise ValidationWouldWait("no room in the budget now")
                self.used_bytes += more_bytes
                self._peak_since_trim = max(self._peak_since_trim, self.used_bytes)
            return
        deadline = time.monotonic() + self.max_wait_ms / 1000
        with self._room:
            self.waiting += 1
            try:
                while self.used_bytes + more_bytes > self.capacity_bytes:
                    left_s = deadline - time.monotonic()
                    if left_s <= 0:
                        self.refused += 1
                        raise ThrottlingQuotaExceededError(
                            f"the broker is at its {BUDGET_KEY} limit ({self.capacity_bytes}); "
                            "retry later"
                        )
                    self._room.wait(left_s)
                self.used_bytes += more_bytes
                self._peak_since_trim = max(self._peak_since_trim, self.used_bytes)
            finally:
                self.waiting -= 1

    def _give_back(self, size_bytes: int) -> None:
        with self._room:
            self.used_bytes -= size_bytes
            self._room.notify_all()
            burst_over = self.used_bytes == 0 and self._peak_since_trim >= TRIM_AFTER_BYTES
            if burst_over:
                self._peak_since_trim = 0
                self.trims += 1
        if burst_over:
            _trim_heap()


class Reservation:
    """What one validation holds of a ``DecompressedBytesBudget``."""

    def __init__(self, budget: DecompressedBytesBudget, may_wait: bool) -> None:
        self.budget = budget
        self.may_wait = may_wait
        self.size_bytes = 0
        self.decoded_bytes = 0

    def grow_to(self, size_bytes: int) -> None:
        """Hold ``size_bytes`` in all (no less than now), waiting for room if need be."""
        if size_bytes <= self.size_bytes:
            return
        # What is held stays held while it waits: the window it counts is in memory.  Two
        # growing at once may each wait for the other; the wait's bound ends that.
        self.budget._take(size_bytes - self.size_bytes, size_bytes, self.may_wait)
        self.size_bytes = size_bytes

    def decoded(self, size_bytes: int) -> None:
        """``size_bytes`` more of the batch were decoded."""
        self.decoded_bytes += size_bytes
        if not self.may_wait and self.decoded_bytes > INLINE_DECODED_BYTES:
            raise ValidationWouldWait(f"the batch decodes to more than {INLINE_DECODED_BYTES}")

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _error: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.budget._give_back(self.size_bytes)
        self.size_bytes = 0
