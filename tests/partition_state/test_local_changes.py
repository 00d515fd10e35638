"""The directory store's change journal: a reader told of a change waits for its writer,
and a journal it cannot read makes it read everything (real files, real locks)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from tierlog.file_lock import exclusive_lock
from tierlog.partition_state.change_journal import TopicChanges
from tierlog.partition_state.local_changes import LocalChangeJournal
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import PARTITIONS_PER_PART, PartitionState
from tierlog.partition_state.store_follower import StoreFollower

WAIT_S = 10.0


def _blocked_on(lock: Path) -> bool:
    """Whether some process or thread waits for ``lock`` (a ``->`` line of /proc/locks)."""
    inode = f":{lock.stat().st_ino} "
    waiting = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and inode in line for line in waiting)


def test_a_reader_told_of_a_change_waits_until_its_writer_lets_go(tmp_path: Path) -> None:
    """The writer numbers its change under the changed file's lock, before writing the
    file: a reader that sees the number must not read the file before the writer is done
    (or dead), or it would keep the old document past the change it was told of."""
    journal = LocalChangeJournal(tmp_path)
    lock = tmp_path / "orders.json.lock"
    journal.record("payments", [tmp_path / "payments.json.lock"])
    cursor = journal.since(None).cursor
    with ThreadPoolExecutor(1) as reader, exclusive_lock(lock):
        journal.record("orders", [lock])
        answer: Future[TopicChanges] = reader.submit(journal.since, cursor)
        deadline = time.monotonic() + WAIT_S
        while not _blocked_on(lock):
            assert time.monotonic() < deadline, "the reader did not wait for the writer"
            assert not answer.done(), "the reader answered while the writer held the file"
            threading.Event().wait(0.01)
    assert answer.result(WAIT_S).topics == frozenset({"orders"})


def test_an_unreadable_journal_makes_readers_read_everything_until_a_write(
    tmp_path: Path,
) -> None:
    store = LocalStateStore(tmp_path)
    store.create_topic("orders", {0: PartitionState.new((1,))})
    follower = StoreFollower(store)
    follower.refresh()
    (tmp_path / "changes").write_text("\x00\x00 torn by a crash")

    assert follower.refresh().changed is None  # every topic read again
    assert follower.refresh().changed is None  # and again, while it stays unreadable
    store.create_topic("payments", {0: PartitionState.new((1,))})  # starts it afresh
    view = follower.refresh()
    assert view.changed is None
    assert set(view.topics) == {"orders", "payments"}
    assert follower.refresh().changed == frozenset()


def test_a_reader_told_of_a_batch_over_two_parts_reads_all_of_it(tmp_path: Path) -> None:
    """``alter_partitions`` over two parts (a stopping broker's hand-over): a reader told
    of the batch reads both parts' changes. Written part by part, a reader told of the
    first part read partition 0's new leader beside partition 1,000's old one, and named
    the rest only a poll later. (A later batch may show in part: it is told next time.)"""
    writer = LocalStateStore(tmp_path)
    far = PARTITIONS_PER_PART  # the first partition of the second part
    writer.create_topic("orders", {p: PartitionState.new((1, 2)) for p in range(far + 1)})
    created = LocalChangeJournal(tmp_path).since(None).cursor.number  # its two parts
    follower = StoreFollower(LocalStateStore(tmp_path))
    done = threading.Event()
    behind: list[tuple[int, int, int]] = []  # (batches told of, epoch of 0, of far)

    def read_until_done() -> None:
        journal = LocalChangeJournal(tmp_path)
        while not done.is_set():
            told = journal.since(None).cursor.number - created  # read before the view
            partitions = follower.refresh().topics["orders"][0]
            batches = (told + 1) // 2  # each batch numbers two changes, one a part
            epochs = (partitions[0].leader_epoch, partitions[far].leader_epoch)
            if min(epochs) < batches:
                behind.append((batches, *epochs))

    with ThreadPoolExecutor(1) as reader:
        reading = reader.submit(read_until_done)
        for _ in range(100):
            now = writer.read_topic("orders")
            moved = {
                p: (now[p].partition_epoch, now[p].with_leader(now[p].isr[-1])) for p in (0, far)
            }
            assert not writer.alter_partitions("orders", moved).lost
        done.set()
        reading.result(WAIT_S)
    assert behind == []
