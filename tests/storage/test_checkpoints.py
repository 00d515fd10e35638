"""Kafka's small state files, byte for byte, written atomically."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tierlog.storage.checkpoints import (
    atomic_write,
    base64_uuid,
    read_epoch_checkpoint,
    read_offset_checkpoint,
    read_offset_checkpoint_or_warn,
    write_epoch_checkpoint,
    write_meta_properties,
    write_offset_checkpoint,
    write_partition_metadata,
)
from tierlog.storage.errors import KafkaStorageError
from tierlog.storage.properties import read_properties
from tierlog.storage.topic_partition import TopicPartition


def test_offset_checkpoint_is_version_count_then_topic_partition_offset_lines(
    tmp_path: Path,
) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    offsets = {TopicPartition("orders", 1): 420, TopicPartition("orders", 0): 17,
               TopicPartition("a.b-c_d", 12): 0}  # fmt: skip
    write_offset_checkpoint(path, offsets)
    assert path.read_text() == "0\n3\na.b-c_d 12 0\norders 0 17\norders 1 420\n"
    assert read_offset_checkpoint(path) == offsets


def test_an_empty_offset_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    write_offset_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"
    assert read_offset_checkpoint(path) == {}


def test_a_missing_checkpoint_reads_as_empty(tmp_path: Path) -> None:
    assert read_offset_checkpoint(tmp_path / "absent") == {}
    assert read_epoch_checkpoint(tmp_path / "absent") == []


def test_reads_a_checkpoint_as_kafka_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_text("0\n2\n__consumer_offsets 7 123456789012\nt 0 5\n")
    assert read_offset_checkpoint(path) == {
        TopicPartition("__consumer_offsets", 7): 123456789012,
        TopicPartition("t", 0): 5,
    }


@pytest.mark.parametrize(
    "text",
    [
        "1\n1\nt 0 5\n",  # unknown version
        "0\n2\nt 0 5\n",  # fewer entries than the count
        "0\n1\nt 0\n",  # an entry with a missing field
        "0\n1\nt zero 5\n",  # not a number
        "",
    ],
)
def test_a_malformed_checkpoint_is_a_storage_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(KafkaStorageError):
        read_offset_checkpoint(path)


def test_a_binary_checkpoint_is_a_storage_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(b"0\n1\n\xff\xfe\x00 0 5\n")
    with pytest.raises(KafkaStorageError, match="recovery-point-offset-checkpoint: not a text"):
        read_offset_checkpoint(path)


def test_an_unreadable_checkpoint_is_read_as_absent_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_text("0\n2\nt 0 5\n")  # cut short: one entry of two
    assert read_offset_checkpoint_or_warn(path, "starting from the segments") == {}
    (warning,) = caplog.records
    assert warning.levelname == "WARNING"
    assert warning.getMessage() == (
        f"ignoring {path} (starting from the segments): {path}: expected 2 entries of 3 fields"
    )
    path.write_text("0\n1\nt 0 5\n")
    assert read_offset_checkpoint_or_warn(path, "unused") == {TopicPartition("t", 0): 5}


def test_leader_epoch_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_epoch_checkpoint(path, [(0, 0), (3, 1500), (4, 2200)])
    assert path.read_text() == "0\n3\n0 0\n3 1500\n4 2200\n"
    assert read_epoch_checkpoint(path) == [(0, 0), (3, 1500), (4, 2200)]


def test_partition_metadata_holds_the_topic_id_in_kafka_base64(tmp_path: Path) -> None:
    topic_id = uuid.UUID("6c1f5a1e-2b5d-4f0e-9d7c-2a1b3c4d5e6f")
    path = tmp_path / "partition.metadata"
    write_partition_metadata(path, topic_id)
    assert path.read_text() == "version: 0\ntopic_id: bB9aHitdTw6dfCobPE1ebw\n"
    assert base64_uuid(topic_id) == "bB9aHitdTw6dfCobPE1ebw"


def test_meta_properties_are_sorted_key_value_lines_under_a_comment(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    properties = {"version": "1", "node.id": "3", "cluster.id": "abc", "directory.id": "xyz"}
    write_meta_properties(path, properties)
    assert read_properties(path) == properties
    lines = path.read_text().splitlines()
    assert lines[0] == "#"
    assert sorted(lines[1:]) == ["cluster.id=abc", "directory.id=xyz", "node.id=3", "version=1"]


def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_text("old")
    atomic_write(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["state"]


def test_atomic_write_failure_is_a_storage_error_and_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_text("old")
    (tmp_path / "state.tmp").mkdir()  # the temporary name is taken by a directory
    with pytest.raises(KafkaStorageError):
        atomic_write(path, "new")
    assert path.read_text() == "old"
