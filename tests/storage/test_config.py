"""LogConfig: Kafka's topic config names and defaults, parsed and validated once."""

from __future__ import annotations

import pytest

from tierlog.storage.config import LONG_MAX, LogConfig, TimestampType, check_config_change
from tierlog.storage.errors import InvalidConfigError


def test_defaults_are_kafkas() -> None:
    defaults = LogConfig().to_properties()
    assert defaults["segment.bytes"] == str(1024**3)
    assert defaults["segment.ms"] == str(7 * 24 * 3600 * 1000)
    assert defaults["segment.index.bytes"] == str(10 * 1024 * 1024)
    assert defaults["index.interval.bytes"] == "4096"
    assert defaults["flush.messages"] == str(LONG_MAX)
    assert defaults["max.message.bytes"] == str(1024 * 1024 + 12)
    assert defaults["message.timestamp.type"] == "CreateTime"
    assert defaults["cleanup.policy"] == "delete"
    assert defaults["retention.bytes"] == "-1"
    assert defaults["min.cleanable.dirty.ratio"] == "0.5"
    assert defaults["preallocate"] == "false"
    assert defaults["local.retention.ms"] == "-2"
    assert defaults["min.insync.replicas"] == "1"
    assert defaults["unclean.leader.election.enable"] == "false"


def test_from_properties_parses_strings_and_typed_values() -> None:
    cfg = LogConfig.from_properties(
        {
            "segment.bytes": "1048576",
            "flush.ms": 1000,
            "cleanup.policy": "compact,delete",
            "message.timestamp.type": "LogAppendTime",
            "min.cleanable.dirty.ratio": "0.25",
        }
    )
    assert cfg.segment_bytes == 1048576
    assert cfg.flush_ms == 1000
    assert cfg.compacted
    assert cfg.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert cfg.min_cleanable_dirty_ratio == 0.25


def test_properties_overlay_a_base_config() -> None:
    base = LogConfig.from_properties({"segment.bytes": "2000", "retention.ms": "5"})
    cfg = LogConfig.from_properties({"retention.ms": "10"}, base)
    assert (cfg.segment_bytes, cfg.retention_ms) == (2000, 10)


def test_to_properties_round_trips() -> None:
    cfg = LogConfig.from_properties({"segment.ms": "123", "preallocate": "true"})
    assert LogConfig.from_properties(cfg.to_properties()) == cfg


@pytest.mark.parametrize(
    "props",
    [
        {"segment.bytz": "1"},  # unknown key
        {"segment.bytes": "ten"},
        {"segment.bytes": "13"},  # below Kafka's minimum of 14
        {"segment.bytes": str(2**31)},  # does not fit a Java int
        {"segment.ms": "0"},
        {"flush.messages": str(2**63)},  # does not fit a Java long
        {"cleanup.policy": "shred"},
        {"message.timestamp.type": "WallClock"},
        {"compression.type": "brotli"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"preallocate": "yes"},
        {"retention.ms": "-3"},
        {"min.insync.replicas": "0"},  # Kafka's minimum is 1
        {"min.insync.replicas": str(2**31)},  # does not fit a Java int
        {"unclean.leader.election.enable": "maybe"},
        {"tierlog.remote.segment.max.upload.interval.ms": "-2"},  # -1 is off
        {"tierlog.remote.segment.max.upload.interval.ms": "5m"},
    ],
)
def test_invalid_configs_are_rejected(props: dict[str, str]) -> None:
    with pytest.raises(InvalidConfigError):
        LogConfig.from_properties(props)


def test_keys_map_every_kafka_name_to_a_field() -> None:
    keys = LogConfig.keys()
    assert keys["segment.jitter.ms"] == "segment_jitter_ms"
    assert keys["local.retention.bytes"] == "local_retention_bytes"
    assert len(keys) == len(set(keys.values()))


@pytest.mark.parametrize("policy", ["delete", "compact", "compact,delete"])
def test_tiered_storage_takes_every_cleanup_policy(policy: str) -> None:
    """A compacted topic may be tiered: its tier is cleaned too (``tier.tiered_cleaner``)."""
    tiered = LogConfig.from_properties({"remote.storage.enable": "TRUE", "cleanup.policy": policy})
    assert tiered.remote_storage_enable is True
    assert tiered.compacted is ("compact" in policy)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "1_000_000"),  # Python's int() takes it; Long.parseLong does not
        ("retention.ms", "\u0661\u0660\u0660\u0660"),  # Arabic-Indic digits: "1000"
        ("retention.bytes", "\uff11\uff10"),  # full-width digits
        ("segment.ms", "1e3"),
        ("segment.ms", "0x10"),
        ("min.cleanable.dirty.ratio", "nan"),  # passed every bound check, as NaN does
        ("min.cleanable.dirty.ratio", "-inf"),
        ("min.cleanable.dirty.ratio", "0_5"),
        ("min.cleanable.dirty.ratio", "\u0660.\u0665"),
    ],
)
def test_numbers_are_plain_ascii_as_kafka_configdef_parses_them(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError, match=rf"invalid value .* for {key}: not a"):
        LogConfig.from_properties({key: value})


def test_numbers_kafka_takes_are_taken() -> None:
    cfg = LogConfig.from_properties(
        {
            "segment.bytes": " +1048576 ",  # ConfigDef trims, and parseLong takes a sign
            "retention.ms": "-1",
            "min.cleanable.dirty.ratio": ".25",
            "delete.retention.ms": 0,
        }
    )
    assert (cfg.segment_bytes, cfg.retention_ms, cfg.delete_retention_ms) == (1048576, -1, 0)
    assert cfg.min_cleanable_dirty_ratio == 0.25
    assert (
        LogConfig.from_properties({"min.cleanable.dirty.ratio": "5e-1"}).min_cleanable_dirty_ratio
        == 0.5
    )


def test_replication_settings_parse_under_kafkas_names() -> None:
    cfg = LogConfig.from_properties(
        {"min.insync.replicas": "2", "unclean.leader.election.enable": "TRUE"}
    )
    assert (cfg.min_insync_replicas, cfg.unclean_leader_election_enable) == (2, True)
    assert LogConfig.from_properties(cfg.to_properties()) == cfg


def test_turning_tiering_off_is_refused_unless_the_tier_may_be_deleted() -> None:
    """KIP-950 (Kafka's LogConfig.validateTurningOffRemoteStorageWithDelete)."""
    tiered = LogConfig.from_properties({"remote.storage.enable": "true"})
    off = LogConfig.from_properties({"remote.storage.enable": "false"})
    with pytest.raises(InvalidConfigError, match=r"remote\.log\.delete\.on\.disable=true"):
        check_config_change(tiered, off)
    with pytest.raises(InvalidConfigError, match=r"remote\.log\.delete\.on\.disable"):
        check_config_change(tiered, LogConfig())  # the override removed: the default, off
    deleting = LogConfig.from_properties(
        {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    )
    check_config_change(tiered, deleting)
    check_config_change(off, off)  # never tiered: nothing to delete
    read_only = LogConfig.from_properties(
        {"remote.storage.enable": "true", "remote.log.copy.disable": "true"}
    )
    check_config_change(tiered, read_only)
    assert not read_only.copies_to_tier and tiered.copies_to_tier


def test_a_read_only_tier_needs_local_retention_equal_to_the_total() -> None:
    """Kafka's validateRetentionConfigsWhenRemoteCopyDisabled: -2 or the same value."""
    read_only = {"remote.storage.enable": "true", "remote.log.copy.disable": "true"}
    for local in ({"local.retention.ms": "1000"}, {"local.retention.bytes": "0"}):
        with pytest.raises(InvalidConfigError, match=r"remote\.log\.copy\.disable=true"):
            LogConfig.from_properties({**read_only, **local})
    LogConfig.from_properties({**read_only, "retention.ms": "1000", "local.retention.ms": "1000"})
    LogConfig.from_properties({"remote.log.copy.disable": "true", "local.retention.ms": "1"})
