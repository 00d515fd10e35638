"""Process tuning: freed MiB buffers are reused, not faulted in again, and full
collections leave start-up objects alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# What a producer does a batch: records gather in a bytearray that grows to 1 MiB, the
# built batch is a copy, the request another; all freed before the next batch.
CHURN = textwrap.dedent(
    """
    import resource, sys
    from tierlog.process_tuning import keep_freed_memory
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

# An object in a reference cycle of its own: only the cyclic GC frees it.
CYCLE = textwrap.dedent(
    """
    import gc, sys, weakref
    class Node:
        pass
    def cycle():
        node = Node()
        node.itself = node
        return node
    """
)

FREEZE = CYCLE + textwrap.dedent(
    """
    from tierlog.process_tuning import tune_process
    garbage_before = weakref.ref(cycle())
    alive = [cycle() for _ in range(3)]
    tune_process()
    garbage_after = weakref.ref(cycle())
    gc.collect()
    print(gc.get_freeze_count(), garbage_before() is None, garbage_after() is None)
    """
)


def run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_freed_batches_are_reused_without_page_faults() -> None:
    default, kept = int(run(CHURN, "default")), int(run(CHURN, "keep"))
    assert default > 30 * PAGES_A_MIB  # by default each batch maps fresh pages
    assert kept < PAGES_A_MIB, (default, kept)


def test_start_up_objects_are_frozen_and_later_garbage_is_still_collected() -> None:
    frozen, before_collected, after_collected = run(FREEZE).split()
    assert int(frozen) > 1000  # the interpreter's modules, classes and functions
    assert before_collected == "True"  # garbage at the time is collected, not frozen
    assert after_collected == "True"


NEW_OBJECTS = CYCLE + textwrap.dedent(
    """
    from tierlog.process_tuning import freeze_new_objects, tune_process
    untuned = freeze_new_objects()
    if sys.argv[1] == "tuned":
        tune_process()
    kept = cycle()
    garbage = weakref.ref(cycle())
    tuned = freeze_new_objects()
    scanned = any(thing is kept for thing in gc.get_objects())
    thawed_garbage = weakref.ref(kept)
    del kept
    freeze_new_objects(thaw=True)
    print(untuned, tuned, scanned, garbage() is None, thawed_garbage() is None)
    """
)


def test_objects_made_after_start_up_are_frozen_only_in_a_tuned_process() -> None:
    assert run(NEW_OBJECTS, "untuned").split()[:3] == ["False", "False", "True"]
    untuned, tuned, scanned, garbage_collected, thawed_collected = run(NEW_OBJECTS, "tuned").split()
    assert (untuned, tuned, scanned) == ("False", "True", "False")
    assert garbage_collected == "True"  # garbage at the freeze is collected, not frozen
    assert thawed_collected == "True"  # let go of after its freeze: collected once thawed
