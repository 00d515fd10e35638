"""The topic store over several log dirs: a copy in each, the newest one read, whatever
the order of ``--data-dir``; and what a user meets through a real sidecar when a log dir
is added, or when one partition is found in two log dirs."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.storage.conftest import headers_of, records_of
from tests.support.scrape import METRICS, Scrape, scrape_sidecar
from tests.support.sidecars import console_script
from tests.support.small_disk import fill_leaving, small_disk_at
from tierlog.api.v1 import admin_service_pb2, log_service_pb2
from tierlog.broker.topics import TOPICS_FILE, TopicStore
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import (
    InvalidConfigError,
    KafkaStorageError,
    UnknownTopicOrPartitionError,
)
from tierlog.storage.records import SimpleRecord, build_batch

from .conftest import Sidecar, SidecarFactory

COMPACT = {"cleanup.policy": "compact"}


def _store(*log_dirs: Path) -> TopicStore:
    return TopicStore(log_dirs, LogConfig())


def _run_sidecar(*log_dirs: Path) -> subprocess.CompletedProcess[str]:
    """A sidecar expected to refuse to start: its exit status and output."""
    command = [console_script("tierlog-sidecar"), "--listen", "127.0.0.1:0"]
    for log_dir in log_dirs:
        command += ["--data-dir", str(log_dir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def test_every_log_dir_holds_the_topics_and_any_order_reads_them(tmp_path: Path) -> None:
    a, b, new = tmp_path / "a", tmp_path / "b", tmp_path / "new"
    store = _store(a, b)
    store.create("compacted", 2, COMPACT)
    assert (a / TOPICS_FILE).read_text() == (b / TOPICS_FILE).read_text()

    for order in [(b, a), (new, a, b), (new, b)]:
        reread = _store(*order)
        assert [(t.name, t.partition_count) for t in reread.topics()] == [("compacted", 2)]
        assert reread.log_config("compacted").cleanup_policy == "compact"


def test_a_file_from_before_copies_is_found_behind_a_new_log_dir(tmp_path: Path) -> None:
    """What an older version wrote: one file, in what was then the first log dir."""
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    legacy = {"version": 1, "topics": {"compacted": {"partitions": 1, "configs": COMPACT}}}
    (old / TOPICS_FILE).write_text(json.dumps(legacy))

    store = _store(new, old)
    assert store.log_config("compacted").cleanup_policy == "compact"
    assert not (new / TOPICS_FILE).exists()  # nothing is written before sync
    store.sync()
    assert json.loads((new / TOPICS_FILE).read_text())["topics"] == legacy["topics"]
    assert (old / TOPICS_FILE).read_text() == (new / TOPICS_FILE).read_text()


def test_the_newest_copy_wins_over_a_log_dir_that_was_away(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    store = _store(a, b)
    store.create("orders", 1, {})
    store = _store(b)  # a is left out for a while, and topics change meanwhile
    store.alter_configs("orders", COMPACT, [])
    store.create("events", 1, {})

    back = _store(a, b)
    assert [t.name for t in back.topics()] == ["events", "orders"]
    assert back.log_config("orders").cleanup_policy == "compact"
    back.sync()
    assert (a / TOPICS_FILE).read_text() == (b / TOPICS_FILE).read_text()


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state"])
def test_an_internal_topic_is_refused_the_tier_and_others_are_not(
    tmp_path: Path, name: str
) -> None:
    """Their coordinators load them from the local log only (docs/STORAGE.md)."""
    store = _store(tmp_path)
    tiered = {"remote.storage.enable": "true"}

    with pytest.raises(InvalidConfigError, match=f"{name}.*remote.storage.enable"):
        store.validate_new(name, 1, tiered)
    store.create(name, 1, COMPACT)
    with pytest.raises(InvalidConfigError, match=name):
        store.alter_configs(name, tiered, [])
    with pytest.raises(InvalidConfigError, match=name):  # what a replicated cluster checks
        store.validate_configs(name, {**COMPACT, **tiered})

    assert not store.log_config(name).remote_storage_enable
    store.alter_configs(name, {"remote.storage.enable": "false"}, [])
    assert store.create("tiered", 1, tiered).configs == tiered


def test_copies_that_disagree_and_neither_is_newer_stop_the_start(tmp_path: Path) -> None:
    """Two files of an older version: one adopted the topic without its overrides (the
    first log dir was a new disk), the other kept them. Neither may be guessed."""
    a, b = tmp_path / "a", tmp_path / "b"
    for log_dir, configs in [(a, {}), (b, COMPACT)]:
        log_dir.mkdir()
        document = {"version": 1, "topics": {"orders": {"partitions": 1, "configs": configs}}}
        (log_dir / TOPICS_FILE).write_text(json.dumps(document))
    with pytest.raises(InvalidConfigError) as refused:
        _store(a, b)
    assert str(a / TOPICS_FILE) in str(refused.value)
    assert str(b / TOPICS_FILE) in str(refused.value)

    result = _run_sidecar(a, b)  # what the operator sees
    assert result.returncode == 2
    assert f"INVALID_CONFIG: {a / TOPICS_FILE} and {b / TOPICS_FILE} disagree" in result.stderr


def test_a_change_that_cannot_be_written_is_refused_and_not_read_back(tmp_path: Path) -> None:
    """One log dir is full: the change fails with KAFKA_STORAGE_ERROR, is not listed, and
    the copy written before the full one is put back, so a restart does not find it."""
    with small_disk_at(tmp_path / "disk", "64k") as disk:
        fine, full = tmp_path / "fine", disk / "full"
        store = _store(fine, full)
        store.create("kept", 1, {})
        filler = fill_leaving(disk, 0)
        with pytest.raises(KafkaStorageError, match="No space left"):
            store.create("refused", 1, COMPACT)
        assert [t.name for t in store.topics()] == ["kept"]
        with pytest.raises(UnknownTopicOrPartitionError):
            store.get("refused")
        assert [t.name for t in _store(fine, full).topics()] == ["kept"]  # as a restart reads

        filler.unlink()
        store.create("refused", 1, COMPACT)  # the name was never taken
        assert [t.name for t in _store(full, fine).topics()] == ["kept", "refused"]


def test_a_log_dir_too_full_for_its_copy_does_not_stop_the_start(tmp_path: Path) -> None:
    with small_disk_at(tmp_path / "disk", "64k") as disk:
        fine, full = tmp_path / "fine", disk / "full"
        _store(fine).create("orders", 1, COMPACT)
        filler = fill_leaving(disk, 0)
        store = _store(full, fine)
        store.sync()  # cannot write full's copy: the store still serves the newest
        assert store.log_config("orders").cleanup_policy == "compact"
        assert not (full / TOPICS_FILE).exists()
        filler.unlink()
        store.sync()
        assert (full / TOPICS_FILE).read_text() == (fine / TOPICS_FILE).read_text()


# -- through a real sidecar ---------------------------------------------------------------

KEYS = 4
PRODUCED = 60  # one record a batch, keys cycling: several closed segments of 1000 bytes
# Broker-wide time retention of 1 ms: any topic that lost its compact override would
# have its closed segments deleted at the next retention pass.
BROKER = ("log.retention.ms=1", "log.retention.check.interval.ms=100")


def _value(index: int) -> bytes:
    return b"value-%d" % index


def _produce_updates(sidecar: Sidecar) -> None:
    now = int(time.time() * 1000)
    for index in range(PRODUCED):
        batch = build_batch([SimpleRecord(b"key-%d" % (index % KEYS), _value(index), now, ())])
        sidecar.log.Produce(log_service_pb2.ProduceRequest(topic="compacted", record_batches=batch))


def _fetch_all(sidecar: Sidecar) -> tuple[int, list[tuple[bytes | None, bytes | None]]]:
    """The log start offset, and every record's key and value from there to the end."""
    first = sidecar.log.Fetch(log_service_pb2.FetchRequest(topic="compacted", offset=0))
    offset, records = first.log_start_offset, []
    while offset < first.high_watermark:
        fetched = sidecar.log.Fetch(
            log_service_pb2.FetchRequest(topic="compacted", offset=offset, max_bytes=1 << 20)
        )
        batches = headers_of(fetched.record_batches)  # a cleaned batch may hold no records
        assert batches, f"nothing fetched at {offset}"
        records += [(record.key, record.value) for record in records_of(fetched.record_batches)]
        offset = batches[-1].last_offset + 1
    return first.log_start_offset, records


def _cleaned_or_retained(sidecar: Sidecar, timeout_s: float = 30) -> Scrape:
    """Metrics once the cleaner has cleaned and retention has run, or once retention has
    deleted segments (what happens to a topic taken for ``delete``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = scrape_sidecar(sidecar)
        cleaned = found.value("tierlog_cleaner_runs_total") >= 1
        if cleaned and found.value("tierlog_retention_runs_total") >= 1:
            return found
        if found.value("tierlog_retention_deleted_segments_total") > 0:
            return found
        time.sleep(0.1)
    raise AssertionError(f"neither cleaned nor retained in {timeout_s}s:\n{sidecar.output}")


def test_a_compacted_topic_stays_compacted_when_a_new_log_dir_is_listed_first(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    first = sidecar_factory(old, *BROKER, "log.cleaner.enable=false", data_dirs=(old,))
    first.create_topic(
        "compacted",
        cleanup_policy="compact",
        segment_bytes="1000",
        min_cleanable_dirty_ratio="0.01",
    )
    _produce_updates(first)
    assert first.stop() == 0

    # A new, empty disk is added, listed first.
    again = sidecar_factory(
        old, *BROKER, METRICS, "log.cleaner.backoff.ms=100", data_dirs=(new, old)
    )
    described = again.admin.DescribeConfigs(
        admin_service_pb2.DescribeConfigsRequest(topic="compacted")
    )
    configs = {entry.name: (entry.value, entry.source) for entry in described.entries}
    assert configs["cleanup.policy"] == ("compact", admin_service_pb2.CONFIG_SOURCE_TOPIC)
    assert configs["segment.bytes"] == ("1000", admin_service_pb2.CONFIG_SOURCE_TOPIC)

    metrics = _cleaned_or_retained(again)
    assert metrics.value("tierlog_retention_deleted_segments_total") == 0
    log_start, records = _fetch_all(again)
    assert log_start == 0
    assert len(records) < PRODUCED  # the cleaner removed overwritten values
    latest = {b"key-%d" % (i % KEYS): _value(i) for i in range(PRODUCED)}
    assert dict(records) == latest  # the last value of each key is kept
    assert (new / TOPICS_FILE).read_text() == (old / TOPICS_FILE).read_text()


def test_one_partition_in_two_log_dirs_stops_the_sidecar_naming_both(
    tmp_path: Path, sidecar_factory: SidecarFactory
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    first = sidecar_factory(a, data_dirs=(a,))
    first.create_topic("orders")
    batch = build_batch([SimpleRecord(b"k", b"v", int(time.time() * 1000), ())])
    first.log.Produce(log_service_pb2.ProduceRequest(topic="orders", record_batches=batch))
    assert first.stop() == 0
    shutil.copytree(a / "orders-0", b / "orders-0")  # a copy made by hand, say

    result = _run_sidecar(a, b)
    assert result.returncode == 2
    assert "KAFKA_STORAGE_ERROR" in result.stderr
    assert f"in both {a / 'orders-0'} and {b / 'orders-0'}" in result.stderr
    assert (a / "orders-0").is_dir() and (b / "orders-0").is_dir()  # nothing touched


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "null",
        '"topics"',
        "42",
        '{"version": 1, "topics": []}',
        '{"version": 1}',
        '{"version": 1, "topics": {"t": []}}',
        '{"version": 1, "topics": {"t": {"partitions": "many", "configs": {}}}}',
        '{"version": 2, "topics": {}}',
        "{not json",
    ],
)
def test_an_unreadable_topics_file_is_invalid_config_naming_it(tmp_path: Path, text: str) -> None:
    path = tmp_path / TOPICS_FILE
    path.write_text(text)
    with pytest.raises(InvalidConfigError, match=TOPICS_FILE):
        TopicStore([tmp_path], LogConfig())
    assert path.read_text() == text  # left as found, for its owner to look at
