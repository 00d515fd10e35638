"""The log manager: log dirs, checkpoints, the clean-shutdown marker, placement, recovery."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from tests.storage.conftest import config, crash, make_batch, read_all_bytes, read_all_records
from tests.storage.tier.faults import FaultyStore
from tests.storage.tier.tiering import TIERED, TP, produce, tier_bytes
from tierlog.storage.checkpoints import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_epoch_checkpoint,
    read_offset_checkpoint,
)
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import (
    InvalidTopicError,
    KafkaStorageError,
    UnknownTopicOrPartitionError,
)
from tierlog.storage.log import Log
from tierlog.storage.manager import LogManager, LogManagerConfig
from tierlog.storage.names import MAX_TOPIC_NAME_LENGTH, delete_dir_name
from tierlog.storage.properties import read_properties
from tierlog.storage.records import iter_batches
from tierlog.storage.tier.layout import partition_prefix
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.tier.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.topic_partition import TopicPartition

ORDERS_0 = TopicPartition("orders", 0)
ORDERS_1 = TopicPartition("orders", 1)


def manager_for(*log_dirs: Path, log_config: LogConfig | None = None) -> LogManager:
    return LogManager(
        LogManagerConfig(
            log_dirs=log_dirs,
            node_id=3,
            cluster_id="test-cluster",
            default_log_config=log_config or LogConfig(),
            flush_check_interval_ms=20,
        )
    )


def test_startup_writes_meta_properties_in_every_log_dir(tmp_path: Path) -> None:
    dirs = (tmp_path / "a", tmp_path / "b")
    manager = manager_for(*dirs)
    manager.startup()
    ids = set()
    for log_dir in dirs:
        properties = read_properties(log_dir / "meta.properties")
        assert properties["version"] == "1"
        assert properties["node.id"] == "3"
        assert properties["cluster.id"] == "test-cluster"
        ids.add(properties["directory.id"])
    assert len(ids) == 2  # each log dir has its own id
    manager.shutdown()
    # A restart keeps the existing meta.properties.
    before = (dirs[0] / "meta.properties").read_text()
    again = manager_for(*dirs)
    again.startup()
    assert (dirs[0] / "meta.properties").read_text() == before
    again.shutdown()


def test_the_manager_knows_which_log_dirs_it_formatted_at_this_start(tmp_path: Path) -> None:
    """A log dir without meta.properties (new, or wiped) is formatted at the start: its
    partitions hold nothing they held before (the broker's lease says so); one that kept
    its file, after a clean stop or a crash alike, was not."""
    dirs = (tmp_path / "a", tmp_path / "b")
    first = manager_for(*dirs)
    first.startup()
    assert first.formatted_log_dirs == list(dirs)
    first.shutdown()
    shutil.rmtree(dirs[1])
    again = manager_for(*dirs)
    again.startup()
    assert again.formatted_log_dirs == [dirs[1]]
    again.shutdown()
    (dirs[0] / CLEAN_SHUTDOWN_MARKER).unlink()  # as a kill -9 leaves it
    crashed = manager_for(*dirs)
    crashed.startup()
    assert crashed.formatted_log_dirs == []
    crashed.shutdown()


def test_new_partitions_get_their_metadata_files(tmp_path: Path) -> None:
    manager = manager_for(tmp_path / "a")
    manager.startup()
    log = manager.get_or_create_log(ORDERS_0)
    assert manager.get_or_create_log(ORDERS_0) is log
    directory = tmp_path / "a" / "orders-0"
    assert log.directory == directory
    assert (directory / "partition.metadata").read_text().startswith("version: 0\ntopic_id: ")
    assert read_epoch_checkpoint(directory / "leader-epoch-checkpoint") == [(0, 0)]
    assert (directory / "00000000000000000000.log").exists()
    manager.shutdown()


def test_shutdown_writes_checkpoints_and_the_clean_marker_and_startup_removes_it(
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "a"
    manager = manager_for(log_dir)
    manager.startup()
    manager.get_or_create_log(ORDERS_0)
    manager.append(ORDERS_0, make_batch(5))
    manager.get_or_create_log(ORDERS_1)
    manager.append(ORDERS_1, make_batch(2))
    manager.append(ORDERS_1, make_batch(2))
    manager.get_log(ORDERS_1).increment_log_start_offset(1)
    manager.shutdown()
    assert (log_dir / CLEAN_SHUTDOWN_MARKER).exists()
    assert read_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT) == {
        ORDERS_0: 5,
        ORDERS_1: 4,
    }
    assert read_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT) == {
        ORDERS_0: 0,
        ORDERS_1: 1,
    }
    assert (log_dir / RECOVERY_POINT_CHECKPOINT).read_text() == "0\n2\norders 0 5\norders 1 4\n"

    again = manager_for(log_dir)
    again.startup()
    assert again.had_clean_shutdown[log_dir] is True
    assert not (log_dir / CLEAN_SHUTDOWN_MARKER).exists()
    assert again.partitions == [ORDERS_0, ORDERS_1]
    assert again.get_log(ORDERS_1).log_start_offset == 1
    assert again.get_log(ORDERS_1).recovery_point == 4
    assert [r.offset for r in read_all_records(again.get_log(ORDERS_0))] == [0, 1, 2, 3, 4]
    again.shutdown()


def test_a_log_start_checkpoint_past_the_log_end_starts_the_log_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint saying the log starts past its end (segments lost, or the file
    edited): the log continues at the checkpoint's offset, as Kafka's loader does, so no
    offset that may have been handed out is handed out again, and every acknowledged
    record reads back. The old segments are kept aside, not deleted."""
    log_dir = tmp_path / "a"
    log_config = config(segment_bytes=400, retention_ms=-1)  # only the log start retains
    manager = manager_for(log_dir, log_config=log_config)
    manager.startup()
    manager.get_or_create_log(ORDERS_0)
    for _ in range(10):
        manager.append(ORDERS_0, make_batch(5))
    manager.shutdown()
    partition_dir = log_dir / ORDERS_0.dir_name
    old_logs = sorted(path.name for path in partition_dir.glob("*.log"))
    assert len(old_logs) > 1
    (log_dir / LOG_START_OFFSET_CHECKPOINT).write_text("0\n1\norders 0 1000\n")

    again = manager_for(log_dir, log_config=log_config)
    with caplog.at_level("WARNING", logger="tierlog.storage"):
        again.startup()
    assert "log start 1000 is past the log end 50" in caplog.text
    log = again.get_log(ORDERS_0)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1000)
    assert again.append(ORDERS_0, make_batch(2)).first_offset == 1000
    again.run_retention_pass()
    assert [r.offset for r in read_all_records(log)] == [1000, 1001]
    aside = sorted(path.name for path in partition_dir.glob("*.log.*"))
    assert aside == [f"{name}.below-log-start" for name in old_logs]
    again.shutdown()

    third = manager_for(log_dir, log_config=log_config)
    third.startup()
    assert [r.offset for r in read_all_records(third.get_log(ORDERS_0))] == [1000, 1001]
    third.shutdown()


def test_new_partitions_go_to_the_log_dir_with_the_fewest(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    manager = manager_for(first)
    manager.startup()
    for partition in range(3):
        manager.get_or_create_log(TopicPartition("old", partition))
    manager.shutdown()

    manager = manager_for(first, second)
    manager.startup()
    placed = []
    for partition in range(5):
        tp = TopicPartition("new", partition)
        manager.get_or_create_log(tp)
        placed.append(manager.log_dir_of(tp))
    # b catches up with a's three partitions first, then they alternate.
    assert placed[:3] == [second, second, second]
    assert sorted(placed[3:]) == [first, second]
    assert (second / "new-0").is_dir()
    manager.shutdown()


@pytest.mark.parametrize("topic", ["../escape", "a/b", "", ".", "..", "x" * 250, "sp ace"])
def test_illegal_topic_names_are_refused_before_touching_disk(tmp_path: Path, topic: str) -> None:
    log_dir = tmp_path / "a"
    manager = manager_for(log_dir)
    manager.startup()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(InvalidTopicError):
        manager.get_or_create_log(TopicPartition(topic, 0))
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert manager.partitions == []
    manager.shutdown()


def test_unknown_partitions(tmp_path: Path) -> None:
    manager = manager_for(tmp_path / "a")
    manager.startup()
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.get_log(ORDERS_0)
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.append(ORDERS_0, make_batch(1))
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.get_or_create_log(TopicPartition("orders", -1))
    manager.shutdown()


def test_delete_log_removes_the_partition(tmp_path: Path) -> None:
    manager = manager_for(tmp_path / "a")
    manager.startup()
    manager.get_or_create_log(ORDERS_0)
    manager.append(ORDERS_0, make_batch(1))
    manager.delete_log(ORDERS_0)
    assert manager.partitions == []
    assert [p.name for p in (tmp_path / "a").iterdir() if p.is_dir()] == []
    manager.shutdown()
    assert read_offset_checkpoint(tmp_path / "a" / RECOVERY_POINT_CHECKPOINT) == {}


def test_a_read_of_a_deleted_log_is_unknown_topic_or_partition(tmp_path: Path) -> None:
    """Readers hold the Log they looked up: one reading while the partition is deleted,
    or after, gets UNKNOWN_TOPIC_OR_PARTITION, never an error from its closed files (a
    struct.error from an unmapped index, EBADF) nor bytes from a reused descriptor."""
    manager = manager_for(tmp_path / "a", log_config=LogConfig(segment_bytes=4096))
    manager.startup()
    outcomes: list[str] = []  # how each reader's reading ended
    for round_ in range(20):
        doomed = manager.get_or_create_log(ORDERS_0)
        for _ in range(30):  # several segments, so reads cross index lookups and files
            manager.append(ORDERS_0, make_batch(5, value_size=100))
        end = doomed.log_end_offset
        stop = threading.Event()

        def read_until_stopped(
            log: Log = doomed, last: int = end, stop: threading.Event = stop
        ) -> None:
            offset = 0
            while not stop.is_set():
                try:
                    read = log.read(offset, 2048)
                except Exception as error:
                    outcomes.append(type(error).__name__)
                    return
                first = next(iter_batches(read.records))
                assert first.base_offset <= offset <= first.last_offset
                offset = (offset + 7) % last

        reader = threading.Thread(target=read_until_stopped, name=f"reader-{round_}")
        reader.start()
        manager.delete_log(ORDERS_0)
        reader.join(timeout=10)
        stop.set()
        reader.join()
        with pytest.raises(UnknownTopicOrPartitionError, match="orders-0 was deleted"):
            doomed.read(0, 2048)
        with pytest.raises(UnknownTopicOrPartitionError, match="orders-0 was deleted"):
            doomed.append(make_batch(1))
    assert len(outcomes) == 20  # each reader's reading ended at the deletion
    assert set(outcomes) == {"UnknownTopicOrPartitionError"}, outcomes
    manager.shutdown()


def test_after_an_unclean_stop_the_logs_are_recovered(tmp_path: Path) -> None:
    log_dir = tmp_path / "a"
    manager = manager_for(log_dir)
    manager.startup()
    manager.get_or_create_log(ORDERS_0)
    for i in range(4):
        manager.append(ORDERS_0, make_batch(2, tag=str(i)))
    manager.flush_all()
    manager.write_checkpoints()
    manager.append(ORDERS_0, make_batch(2, tag="unflushed"))
    crash(manager)  # no close, no checkpoints, no clean-shutdown marker
    active = log_dir / "orders-0" / "00000000000000000000.log"
    with active.open("ab") as file:
        file.write(make_batch(3, tag="torn")[:-9])  # an append cut short by the crash

    recovered = manager_for(log_dir)
    recovered.startup()
    assert recovered.had_clean_shutdown[log_dir] is False
    log = recovered.get_log(ORDERS_0)
    # The page cache kept the unflushed append; only the torn bytes are gone.
    assert log.log_end_offset == 10
    assert log.recovery_point == 10
    assert log.append(make_batch(1)).first_offset == 10
    assert [r.offset for r in read_all_records(log)] == list(range(11))
    recovered.shutdown()


def test_durable_appends_through_the_manager_from_many_threads(tmp_path: Path) -> None:
    manager = manager_for(tmp_path / "a", tmp_path / "b", log_config=config(flush_messages=1))
    manager.startup()
    partitions = [TopicPartition("orders", p) for p in range(4)]
    for tp in partitions:
        manager.get_or_create_log(tp)
    late: list[int] = []

    def produce(tp: TopicPartition) -> None:
        for _ in range(15):
            info = manager.append(tp, make_batch(1))
            if manager.get_log(tp).recovery_point <= info.last_offset:
                late.append(info.last_offset)

    threads = [threading.Thread(target=produce, args=(tp,)) for tp in partitions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert late == []
    manager.shutdown()
    for log_dir in (tmp_path / "a", tmp_path / "b"):
        assert set(read_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT).values()) == {15}


def test_a_second_manager_on_the_same_log_dir_refuses_to_start(tmp_path: Path) -> None:
    first = manager_for(tmp_path / "a")
    first.startup()
    second = manager_for(tmp_path / "a")
    with pytest.raises(KafkaStorageError, match="in use by another process"):
        second.startup()
    first.shutdown()
    second.startup()  # the lock went with the first manager's shutdown
    second.shutdown()


def test_the_same_partition_in_two_log_dirs_stops_startup_naming_both(tmp_path: Path) -> None:
    dirs = (tmp_path / "a", tmp_path / "b")
    first = manager_for(*dirs)
    first.startup()
    first.get_or_create_log(ORDERS_0)
    first.shutdown()
    (placed,) = [d for d in dirs if (d / "orders-0").is_dir()]
    (other,) = [d for d in dirs if d != placed]
    shutil.copytree(placed / "orders-0", other / "orders-0")

    again = manager_for(*dirs)
    with pytest.raises(KafkaStorageError) as refused:
        again.startup()
    assert str(dirs[0] / "orders-0") in str(refused.value)
    assert str(dirs[1] / "orders-0") in str(refused.value)
    assert again.partitions == []
    shutil.rmtree(other / "orders-0")  # the operator removes the stale copy
    again.startup()  # the refusal let go of the log dirs' locks
    assert again.partitions == [ORDERS_0]
    again.shutdown()


def test_a_deletion_cut_short_by_a_crash_is_finished_at_startup(tmp_path: Path) -> None:
    """delete_log renames the directory, then removes it; a crash in between leaves the
    renamed directory, whose name is cut short for a topic of the longest legal name."""
    longest = TopicPartition("t" * MAX_TOPIC_NAME_LENGTH, 0)
    manager = manager_for(tmp_path / "a")
    manager.startup()
    for tp in (longest, ORDERS_0):
        manager.get_or_create_log(tp)
        manager.append(tp, make_batch(3))
    manager.shutdown()
    renamed = tmp_path / "a" / delete_dir_name(longest)
    (tmp_path / "a" / longest.dir_name).rename(renamed)  # as delete_log does first

    again = manager_for(tmp_path / "a")
    again.startup()
    assert again.partitions == [ORDERS_0]
    assert not renamed.exists()
    assert [p.name for p in (tmp_path / "a").iterdir() if p.is_dir()] == ["orders-0"]
    again.shutdown()


# -- with a remote tier -----------------------------------------------------------------


def tiered_manager(data_dir: Path, store: ObjectStore) -> LogManager:
    tier = RemoteLogManager(store, RemoteLogManagerConfig(task_interval_ms=3_600_000))
    return LogManager(LogManagerConfig(log_dirs=(data_dir,), default_log_config=TIERED), tier=tier)


def test_a_tiered_manager_uploads_frees_local_copies_and_rebuilds_an_empty_volume(
    tmp_path: Path,
) -> None:
    store = LocalDirectoryStore(tmp_path / "bucket")
    first = tiered_manager(tmp_path / "pod-a", store)
    first.startup()
    log = first.get_or_create_log(TP)
    produce(log, 10)
    whole = read_all_bytes(log)
    assert first.run_retention_pass() == 0  # nothing tiered yet: every local copy stays
    assert first.tier is not None
    first.tier.run_once()
    assert first.run_retention_pass() == 2
    assert log.local_log_start_offset == 24 and log.log_start_offset == 0
    first.shutdown()

    # The same pod restarts: the log starts at 0 again although its first local segment is 24.
    again = tiered_manager(tmp_path / "pod-a", store)
    again.startup()
    assert again.get_log(TP).log_start_offset == 0
    again.shutdown()

    # A replaced pod, empty volume, same bucket: the partition continues the tier.
    replaced = tiered_manager(tmp_path / "pod-b", store)
    replaced.startup()
    restored = replaced.get_or_create_log(TP)
    assert (restored.log_start_offset, restored.log_end_offset) == (0, 24)
    assert tier_bytes(store) == whole[: len(tier_bytes(store))]
    assert restored.append(make_batch(3)).first_offset == 24
    replaced.shutdown()


def test_a_tiered_partition_is_not_created_while_the_store_is_down(tmp_path: Path) -> None:
    faulty = FaultyStore(LocalDirectoryStore(tmp_path / "bucket"))
    manager = tiered_manager(tmp_path / "data", faulty)
    manager.startup()
    faulty.outage()
    with pytest.raises(KafkaStorageError):
        manager.get_or_create_log(TP)
    assert not (tmp_path / "data" / TP.dir_name).exists()
    faulty.heal()
    assert manager.get_or_create_log(TP).log_end_offset == 0
    manager.shutdown()


def test_deleting_a_tiered_partition_deletes_its_tier(tmp_path: Path) -> None:
    store = LocalDirectoryStore(tmp_path / "bucket")
    manager = tiered_manager(tmp_path / "data", store)
    manager.startup()
    produce(manager.get_or_create_log(TP), 10)
    assert manager.tier is not None
    manager.tier.run_once()
    assert list(store.list(partition_prefix(TP)))
    faulty_delete = FaultyStore(store)
    manager.tier.store = faulty_delete
    faulty_delete.outage()
    with pytest.raises(KafkaStorageError):
        manager.delete_log(TP)
    assert manager.get_log(TP).log_end_offset == 30  # nothing deleted locally either
    faulty_delete.heal()
    manager.delete_log(TP)
    assert list(store.list(partition_prefix(TP))) == []
    assert TP not in manager.partitions
    manager.shutdown()


def test_the_partition_count_and_has_log_follow_the_logs_held(tmp_path: Path) -> None:
    """What a metrics scrape and a topic change ask (``tierlog.metrics.partition.series.max``
    compares the count; a config change asks each partition), answered without listing
    the partitions in order."""
    manager = manager_for(tmp_path / "a")
    manager.startup()
    assert manager.partition_count == 0
    assert not manager.has_log(ORDERS_0)
    manager.get_or_create_log(ORDERS_0)
    manager.get_or_create_log(ORDERS_1)
    assert manager.partition_count == 2
    assert manager.has_log(ORDERS_0)
    manager.delete_log(ORDERS_0)
    assert manager.partition_count == len(manager.partitions) == 1
    assert not manager.has_log(ORDERS_0) and manager.has_log(ORDERS_1)
    manager.shutdown()


def test_a_partition_being_created_holds_up_no_other_partitions_creation(
    tmp_path: Path,
) -> None:
    """A creation's work (its topic's config, its directory, files and their fsyncs)
    runs outside the manager's lock: while one partition's creation is held up, another
    is created, and a second caller for the held-up partition gets its one log."""
    held, release = threading.Event(), threading.Event()

    def topic_config(topic: str) -> LogConfig:
        if topic == "slow":
            held.set()
            release.wait(30)
        return LogConfig()

    manager = LogManager(LogManagerConfig((tmp_path,)), topic_config=topic_config)
    manager.startup()
    slow_tp, fast_tp = TopicPartition("slow", 0), TopicPartition("fast", 0)
    slow: list[Log] = []
    callers = [threading.Thread(target=lambda: slow.append(manager.get_or_create_log(slow_tp)))]
    callers[0].start()
    assert held.wait(30)
    callers.append(threading.Thread(target=lambda: slow.append(manager.get_or_create_log(slow_tp))))
    callers[1].start()
    try:
        fast = threading.Thread(target=manager.get_or_create_log, args=(fast_tp,))
        fast.start()
        fast.join(30)
        assert fast_tp in manager.partitions and slow_tp not in manager.partitions
    finally:
        release.set()
        for caller in callers:
            caller.join(30)
    assert len(slow) == 2 and slow[0] is slow[1] is manager.get_log(slow_tp)
    assert manager.partitions == [fast_tp, slow_tp]
    manager.shutdown()
