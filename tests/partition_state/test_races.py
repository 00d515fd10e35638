"""Writers racing in real processes: no change is lost and none lands twice.

Each writer bumps one partition's leader epoch by compare-and-swap, re-reading after
every lost race. The history check: the partition epochs the store handed out are
exactly 1..N (each success saw a distinct version, so no two writers both won against
the same read), and the final state counts every success.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.state_stores import open_store
from tierlog.partition_state.model import PartitionState
from tierlog.partition_state.store import PartitionStateStore

REPO = Path(__file__).resolve().parents[2]
WRITERS, CHANGES_EACH = 4, 25
OpenStore = Callable[..., tuple[PartitionStateStore, str, str]]


def _writer(kind: str, where: str, partition: int, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.state_stores", "race", kind, where, "orders",
         str(partition), str(count)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.parametrize("partition", [0, 1500], ids=["in-the-head", "in-a-later-part"])
def test_racing_writers_lose_no_change_and_win_none_twice(
    store_at: OpenStore, partition: int
) -> None:
    store, kind, where = store_at()
    store.create_topic("orders", {p: PartitionState.new((1, 2, 3)) for p in range(partition + 1)})

    writers = [_writer(kind, where, partition, CHANGES_EACH) for _ in range(WRITERS)]
    outputs = [writer.communicate(timeout=300) for writer in writers]
    assert all(writer.returncode == 0 for writer in writers), [err for _, err in outputs]

    wins = [json.loads(line) for out, _ in outputs for line in out.splitlines()]
    total = WRITERS * CHANGES_EACH
    assert sorted(win["partition_epoch"] for win in wins) == list(range(1, total + 1))
    final = store.read_topic("orders")[partition]
    assert (final.partition_epoch, final.leader_epoch) == (total, total)
    print(f"\n{kind}: {sum(win['lost'] for win in wins)} lost races over {total} changes")


def test_a_writer_killed_while_holding_the_lock_blocks_nobody(tmp_path: Path) -> None:
    """kill -9 in the middle of a local change: the kernel drops its flock, the next
    writer goes on, and the document is the one before the killed change."""
    store_dir = tmp_path / "state"
    store = open_store("local", str(store_dir))
    store.create_topic("orders", {0: PartitionState.new((1, 2, 3))})
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from pathlib import Path\n"
         "from tierlog.partition_state.local_store import _locked\n"
         "with _locked(Path(sys.argv[1])):\n"
         "    print('held', flush=True)\n"
         "    time.sleep(600)\n",
         str(store_dir / "topics" / "orders.json")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        os.kill(holder.pid, signal.SIGKILL)
    finally:
        holder.wait(timeout=30)

    stored = store.alter_partition("orders", 0, 0, PartitionState.new((1, 2, 3)).with_isr((1,)))
    assert store.read_topic("orders")[0] == stored
