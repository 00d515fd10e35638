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
"""

from __future__ import annotations

import ctypes
import gc

__all__ = [
    "MMAP_THRESHOLD_BYTES",
    "TRIM_THRESHOLD_BYTES",
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


def tune_process() -> bool:
    """Both settings; False if the allocator's could not be set (the GC's always are)."""
    freeze_startup_objects()
    return keep_freed_memory()
