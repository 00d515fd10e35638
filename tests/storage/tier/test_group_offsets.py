"""Groups' offsets in the object store: one object a group, read back as written, keyed
by the id's hash whatever the id holds; an object under ``groups/`` that is not a group's
offsets is a typed error, never a guessed commit; and the clamp a restore applies."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.storage.tier.group_offsets import (
    CorruptGroupOffsetsError,
    GroupOffsets,
    TieredOffset,
    clamp_offset,
    delete_group_offsets,
    group_offsets_key,
    load_group_offsets,
    put_group_offsets,
)
from tierlog.storage.tier.local_store import LocalDirectoryStore
from tierlog.storage.topic_partition import TopicPartition


@pytest.fixture
def store(tmp_path: Path) -> LocalDirectoryStore:
    return LocalDirectoryStore(tmp_path / "bucket")


def test_groups_read_back_as_written_and_go_when_deleted(store: LocalDirectoryStore) -> None:
    odd = GroupOffsets("a/../group ü", {TopicPartition("t", 0): TieredOffset(7)})
    billing = GroupOffsets(
        "billing",
        {
            TopicPartition("orders", 1): TieredOffset(42, 3, "checkpoint"),
            TopicPartition("orders", 0): TieredOffset(0),
        },
    )
    put_group_offsets(store, odd)
    put_group_offsets(store, billing)
    assert sorted(load_group_offsets(store), key=lambda g: g.group_id) == [odd, billing]
    assert group_offsets_key(odd.group_id).startswith("groups/")

    delete_group_offsets(store, ["billing"])
    delete_group_offsets(store, ["billing", "never-written"])  # idempotent
    assert load_group_offsets(store) == [odd]


@pytest.mark.parametrize(
    "body",
    [
        b"{half",
        b'{"version": 2, "group": "g", "offsets": []}',
        b'{"version": 1, "group": "other", "offsets": []}',
        b'{"version": 1, "group": "g", "offsets": [{"topic": "t", "partition": 0}]}',
        b'{"version": 1, "group": "g", "offsets": [{"topic": "t", "partition": 0, '
        b'"offset": 1.5, "leader_epoch": -1, "metadata": ""}]}',
    ],
)
def test_an_object_that_is_not_a_groups_offsets_is_a_typed_error(
    store: LocalDirectoryStore, body: bytes
) -> None:
    store.put(group_offsets_key("g"), body)
    with pytest.raises(CorruptGroupOffsetsError, match=group_offsets_key("g")):
        load_group_offsets(store)


def test_a_restored_offset_is_clamped_to_what_the_partition_holds() -> None:
    assert clamp_offset(5, log_start=10, log_end=20) == 10  # retention moved past it
    assert clamp_offset(15, log_start=10, log_end=20) == 15
    assert clamp_offset(25, log_start=10, log_end=20) == 20  # never reached the tier
