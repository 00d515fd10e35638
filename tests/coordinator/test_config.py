"""The group coordinator's broker configs: Kafka's names and defaults, refused by name when
out of range, and part of the sidecar's config (an unknown key is still an error)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.coordinator.config import GroupCoordinatorConfig
from tierlog.coordinator.transaction_config import TransactionCoordinatorConfig
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


def test_the_transaction_coordinators_defaults_and_names(tmp_path: Path) -> None:
    assert TransactionCoordinatorConfig.from_properties({}) == TransactionCoordinatorConfig()
    defaults = TransactionCoordinatorConfig()
    assert (defaults.topic_partitions, defaults.topic_replication_factor) == (50, 3)
    assert (defaults.max_timeout_ms, defaults.abort_timed_out_interval_ms) == (900_000, 10_000)
    assert defaults.partition_verification  # KIP-890's check, on as in Kafka 3.6+
    assert defaults.topic_configs()["cleanup.policy"] == "compact"
    config = SidecarConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "transaction.state.log.num.partitions": "3",
            "transaction.max.timeout.ms": "60000",
            "transaction.partition.verification.enable": "False",
        }
    )
    assert config.transactions.topic_partitions == 3
    assert config.transactions.max_timeout_ms == 60_000
    assert not config.transactions.partition_verification
    with pytest.raises(InvalidConfigError, match=r"transaction\.max\.timeout\.ms"):
        TransactionCoordinatorConfig.from_properties({"transaction.max.timeout.ms": "0"})
    with pytest.raises(InvalidConfigError, match=r"verification\.enable expects true or false"):
        TransactionCoordinatorConfig.from_properties(
            {"transaction.partition.verification.enable": "yes"}
        )
