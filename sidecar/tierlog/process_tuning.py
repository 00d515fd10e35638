"""Process-wide settings for a process that moves MiB batches: ``tune_process``.

``tierlog`` and ``tierlog-sidecar`` call it once start-up is done; an application that
runs a busy producer or consumer may call it too.  It changes the whole process, so
the client never calls it on its own.

- ``keep_freed_memory``: glibc gives a freed chunk of its mmap threshold or more (128
  KiB at first, raised as such chunks are freed) straight back to the kernel, and
  trims the heap's top once more than its trim threshold is free there.  A producer
  frees several MiB a batch (the records, the built batch, the request, gRPC's copies
  of it), so much of it came back as fresh pages, a page fault each: measured on the
  benchmark machine, ``tierlog perf produce`` of 300,000 1 KiB records in 1 MiB
  batches took 50,000 to 1,160,000 minor faults from run to run, and 19,000 to 24,000
  with the thresholds set here.  A JVM keeps its heap the same way.
- ``freeze_startup_objects``: the cyclic GC's full collections scan every tracked
  object, and the ~50,000 of a started client (modules, classes, gRPC and protobuf)
  made each take ~30 ms, during which no thread runs: measured, at half the peak
  rate the same run's p99 latency went from 57 to 33 ms with them frozen (full
  collections 1 to 2 ms).

A broker's partitions outlive start-up too: a topic created later (or a replica made
here) adds its logs, indexes and replica states after the freeze, and the broker calls
``freeze_new_objects`` then. Unfrozen, 2,000 partitions' objects made each full
collection 0.3-0.4 s on the benchmark machine, and one fell in a survivor's read of a
stopping broker's hand-over: its event loop answered Metadata 0.74 s after the signal
where Kafka's answered in 0.09 s (docs/BENCHMARKS.md, issue 32). A process that never
froze (tests calling ``main``) is left alone.
"""

from __future__ import annotations

import ctypes
import gc

__all__ = [
    "MMAP_THRESHOLD_BYTES",
    "TRIM_THRESHOLD_BYTES",
    "freeze_new_objects",
    "freeze_startup_objects",
    "keep_freed_memory",
    "tune_process",
]

# mallopt's parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # the most glibc takes on 64-bit (half its heap size)
TRIM_THRESHOLD_BYTES = 64 << 20  # free memory kept at the top of each arena


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (which also stops it adjusting them); False
    where the C library has no ``mallopt`` or refused, and nothing changed."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


def freeze_startup_objects() -> None:
    """Collect what is garbage now, then keep every object still alive out of later
    collections (``gc.freeze``): they live as long as the process anyway."""
    gc.collect()
    gc.freeze()


def freeze_new_objects(*, thaw: bool = False) -> bool:
    """In a process that froze its start-up objects: collect what is garbage now among
    the objects made since the last freeze, then freeze the rest, so a full collection
    costs what was made since, not everything the process holds. With ``thaw``,
    everything frozen is first thawed: a caller that just let go of many long-lived
    objects (a deleted topic's logs) has their cycles collected, at one full
    collection's cost, instead of keeping them for good. False, and nothing done, in a
    process that never froze."""
    if not gc.get_freeze_count():
        return False
    if thaw:
        gc.unfreeze()
    freeze_startup_objects()
    return True


def tune_process() -> bool:
    """Both settings; False if the allocator's could not be set (the GC's always are)."""
    freeze_startup_objects()
    return keep_freed_memory()
