"""The offsets a restore kept for the coordinators (real files): read back at start,
dropped group by group as they are committed (the file goes with the last), dropped
whole once ``offsets.retention.minutes`` passed, and a damaged file is a typed error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.coordinator.restored_groups import (
    RESTORED_GROUPS_FILE,
    RestoredGroups,
    save_restored_groups,
)
from tierlog.storage.errors import KafkaStorageError
from tierlog.storage.tier.group_offsets import GroupOffsets, TieredOffset
from tierlog.storage.topic_partition import TopicPartition

RESTORED_MS = 1_700_000_000_000
RETENTION_MS = 60_000
GROUPS = [
    GroupOffsets("a", {TopicPartition("t", 0): TieredOffset(3)}),
    GroupOffsets("b", {TopicPartition("t", 1): TieredOffset(9, 2, "m")}),
]


def test_kept_groups_are_read_back_and_dropped_one_by_one(tmp_path: Path) -> None:
    save_restored_groups(tmp_path, GROUPS, RESTORED_MS)
    kept = RestoredGroups(tmp_path, RETENTION_MS, RESTORED_MS + 1)
    assert kept.pending("b") == GROUPS[1]
    assert kept.of_partition(lambda group: 0 if group == "a" else 1, 1) == ["b"]
    kept.drop(["a"])
    again = RestoredGroups(tmp_path, RETENTION_MS, RESTORED_MS + 2)  # a restart
    assert (again.pending("a"), again.pending("b")) == (None, GROUPS[1])
    again.drop(["b"])
    assert not (tmp_path / RESTORED_GROUPS_FILE).exists()


def test_kept_groups_are_dropped_after_the_offsets_retention(tmp_path: Path) -> None:
    save_restored_groups(tmp_path, GROUPS, RESTORED_MS)
    late = RestoredGroups(tmp_path, RETENTION_MS, RESTORED_MS + RETENTION_MS)
    assert late.pending("a") is None
    assert not (tmp_path / RESTORED_GROUPS_FILE).exists()


def test_no_groups_keep_no_file_and_a_damaged_one_is_a_typed_error(tmp_path: Path) -> None:
    save_restored_groups(tmp_path, [], RESTORED_MS)
    assert not (tmp_path / RESTORED_GROUPS_FILE).exists()
    (tmp_path / RESTORED_GROUPS_FILE).write_text('{"version": 1, "groups": [')
    with pytest.raises(KafkaStorageError, match=RESTORED_GROUPS_FILE):
        RestoredGroups(tmp_path, RETENTION_MS, RESTORED_MS)
