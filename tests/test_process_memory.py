"""keep_freed_memory: freed MiB buffers are reused, not faulted in again."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# What a producer does a batch: records gather in a bytearray that grows to 1 MiB, the
# built batch is a copy, the request another; all freed before the next batch.
CHURN = textwrap.dedent(
    """
    import resource, sys
    from tierlog.process_memory import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    def batch():
        records = bytearray()
        for _ in range(1024):
            records += bytes(1024)
        built = bytes(records)
        del records
        request = b"".join((b"head", built))
        del built, request
    batch()  # the first batch maps its pages either way
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(30):
        batch()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)
PAGES_A_MIB = (1 << 20) // 4096


def faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def test_freed_batches_are_reused_without_page_faults() -> None:
    default, kept = faults("default"), faults("keep")
    assert default > 30 * PAGES_A_MIB  # by default each batch maps fresh pages
    assert kept < PAGES_A_MIB, (default, kept)
