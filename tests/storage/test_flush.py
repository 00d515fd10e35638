"""Group commit: appenders on many partitions share fsync rounds, and flush.ms flushes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from tests.storage.conftest import FakeClock, config, make_batch
from tierlog.storage.errors import KafkaStorageError
from tierlog.storage.flush import GroupCommitter
from tierlog.storage.log import Log


class CountingCommitter(GroupCommitter):
    """A GroupCommitter that counts its fsync rounds."""

    rounds = 0

    def _flush_all(self, logs: Iterable[Log]) -> dict[Log, KafkaStorageError]:
        self.rounds += 1
        return super()._flush_all(logs)


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


def test_durable_appends_from_many_threads_share_fsync_rounds(tmp_path: Path) -> None:
    durable = config(flush_messages=1)
    logs = [Log.open(tmp_path / f"t-{p}", durable) for p in range(6)]
    flushed: list[Log] = []
    committer = CountingCommitter(
        lambda: logs, on_flush=lambda each, _seconds: flushed.append(each)
    )
    for each in logs:
        each.flush_hook = committer.flush_and_wait
    committer.start()
    appends_per_thread = 25
    not_durable: list[tuple[int, int, int]] = []

    def produce(partition_log: Log) -> None:
        for i in range(appends_per_thread):
            info = partition_log.append(make_batch(2, tag=str(i)))
            # Acknowledged means synced: the recovery point already covers the batch.
            if partition_log.recovery_point <= info.last_offset:
                not_durable.append(
                    (id(partition_log), info.last_offset, partition_log.recovery_point)
                )

    threads = [threading.Thread(target=produce, args=(each,)) for each in logs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    committer.stop()
    appends = len(logs) * appends_per_thread
    assert not_durable == []
    assert all(each.recovery_point == each.log_end_offset == 50 for each in logs)
    # One round syncs every partition that asked: far fewer rounds than appends.
    assert 0 < committer.rounds < appends
    assert set(flushed) == set(logs)
    for each in logs:
        each.close()


def test_without_a_running_flusher_the_appender_flushes_itself(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", config(flush_messages=1))
    committer = GroupCommitter(lambda: [log])
    log.flush_hook = committer.flush_and_wait
    info = log.append(make_batch(3))
    assert log.recovery_point == info.last_offset + 1
    log.close()


def test_flush_ms_flushes_in_the_background_once_due(tmp_path: Path) -> None:
    clock = FakeClock()
    log = Log.open(tmp_path / "t-0", config(flush_ms=1000), clock_ms=clock)
    flushed: list[Log] = []
    looks: list[int] = []  # a mark each time the committer looks for logs due

    def logs() -> list[Log]:
        looks.append(1)
        return [log]

    committer = GroupCommitter(
        logs, check_interval_ms=10, on_flush=lambda each, _s: flushed.append(each)
    )
    committer.start()
    log.append(make_batch(4))
    # A whole check after the append (done once the next one looks), but flush.ms has
    # not elapsed on the log's clock.
    appended_at = len(looks)
    assert wait_until(lambda: len(looks) >= appended_at + 2)
    assert log.recovery_point == 0
    assert flushed == []
    clock.advance(1000)
    assert wait_until(lambda: log.recovery_point == 4)
    assert flushed == [log]
    assert log.unflushed_messages == 0
    time.sleep(0.05)
    assert flushed == [log]  # nothing new to flush: no more rounds touch it
    committer.stop()
    log.close()


def test_stop_flushes_what_is_pending_and_returns(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", config(flush_messages=1))
    committer = GroupCommitter(lambda: [log], check_interval_ms=10)
    log.flush_hook = committer.flush_and_wait
    committer.start()
    log.append(make_batch(1))
    committer.stop()
    assert log.append(make_batch(1)).last_offset == 1  # after stop: flushes inline
    assert log.recovery_point == 2
    log.close()


def test_flush_ms_is_looked_for_once_per_check_not_at_every_round(tmp_path: Path) -> None:
    """With flush.messages=1 a round runs at every fsync; looking for logs whose flush.ms
    has elapsed walks every log of the broker, so it is done once per check interval."""
    log = Log.open(tmp_path / "t-0", config(flush_messages=1))
    looks: list[int] = []

    def logs() -> list[Log]:
        looks.append(1)
        return [log]

    committer = CountingCommitter(logs, check_interval_ms=60_000)
    log.flush_hook = committer.flush_and_wait
    committer.start()
    for i in range(20):
        log.append(make_batch(1, tag=str(i)))
    committer.stop()
    assert committer.rounds >= 20  # each durable append waited for a round of its own
    assert len(looks) == 1  # the first round looked; the next look is a minute away
    log.close()
