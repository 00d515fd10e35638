"""Keep freed heap memory in the process rather than handing it back to the kernel.

glibc gives a freed chunk of its mmap threshold or more (128 KiB at first, raised as
such chunks are freed) straight back to the kernel, and trims the heap's top once
more than its trim threshold is free there.  A producer or sidecar moving MiB
batches allocates and frees several MiB a batch (the records, the built batch, the
request, gRPC's copies of it), so much of it came back as fresh pages, each a page
fault: measured on the benchmark machine, ``tierlog perf produce`` of 300,000 1 KiB
records in 1 MiB batches took 50,000 to 1,160,000 minor faults from run to run, and
19,000 to 20,000 with the thresholds set here.  A JVM keeps its heap the same way.

``tierlog`` and ``tierlog-sidecar`` call ``keep_freed_memory`` at start; an
application that runs a busy producer or consumer may call it too.  It changes the
whole process's allocator: freed memory up to ``TRIM_THRESHOLD_BYTES`` an arena
stays mapped, and chunks below ``MMAP_THRESHOLD_BYTES`` come from the heap.
"""

from __future__ import annotations

import ctypes

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "keep_freed_memory"]

# mallopt's parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # the most glibc takes on 64-bit (half its heap size)
TRIM_THRESHOLD_BYTES = 64 << 20


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
