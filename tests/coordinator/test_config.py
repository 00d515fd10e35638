"""The group coordinator's broker configs: Kafka's names and defaults, refused by name when
out of range, and part of the sidecar's config (an unknown key is still an error)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.coordinator.config import GroupCoordinatorConfig
from tierlog.sidecar.config import SidecarConfig
from tierlog.storage.errors import InvalidConfigError


def test_kafkas_defaults() -> None:
    config = GroupCoordinatorConfig.from_properties({})
    assert config == GroupCoordinatorConfig()
    assert (config.offsets_topic_partitions, config.offsets_topic_replication_factor) == (50, 3)
    assert config.offsets_retention_ms == 7 * 24 * 3600 * 1000
    assert config.offset_metadata_max_bytes == 4096
    assert (config.consumer_session_timeout_ms, config.consumer_heartbeat_interval_ms) == (
        45_000,
        5_000,
    )
    assert config.offsets_topic_configs() == {
        "cleanup.policy": "compact",
        "segment.bytes": str(100 * 1024 * 1024),
        "compression.type": "producer",
    }


def test_the_sidecar_takes_them(tmp_path: Path) -> None:
    config = SidecarConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "offsets.topic.num.partitions": "3",
            "offsets.retention.minutes": "2",
        }
    )
    assert config.groups.offsets_topic_partitions == 3
    assert config.groups.offsets_retention_ms == 120_000


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("offsets.topic.num.partitions", "0"),
        ("offsets.topic.replication.factor", "0"),
        ("offsets.retention.minutes", "x"),
        ("offset.metadata.max.bytes", "-1"),
        ("group.consumer.session.timeout.ms", "0"),
        ("group.consumer.max.size", "0"),
    ],
)
def test_out_of_range_values_are_refused_by_name(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError, match=key):
        GroupCoordinatorConfig.from_properties({key: value})
