"""The group coordinator's broker configs, under Kafka's names and with Kafka's defaults.

``offsets.topic.num.partitions`` (50) and ``offsets.topic.replication.factor`` (3) shape
``__consumer_offsets`` when it is created on first use; the factor is capped to the
brokers there are, as Kafka's single-broker dev setups override it to 1 by hand (a
cluster of three gets three). ``offsets.topic.segment.bytes`` (100 MiB) is its
``segment.bytes``. ``offsets.retention.minutes`` (7 days) is how long an offset of a group
with no members is kept after its commit, checked every
``offsets.retention.check.interval.ms`` (10 minutes); ``offset.metadata.max.bytes``
(4096) bounds a commit's metadata string. A commit waits for the in-sync replicas as an
acks=all produce does (the broker's produce timeout, not ``offsets.commit.timeout.ms``).

KIP-848 membership: a member not heard from for ``group.consumer.session.timeout.ms``
(45 s) is removed; members are told to heartbeat every
``group.consumer.heartbeat.interval.ms`` (5 s); a group takes at most
``group.consumer.max.size`` members (Kafka's default: no bound).

Classic groups (JoinGroup/SyncGroup): a member's session timeout must lie within
``group.min.session.timeout.ms`` (6 s) and ``group.max.session.timeout.ms`` (30 min); the
first rebalance of an empty group waits ``group.initial.rebalance.delay.ms`` (3 s) for
more members to join.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tierlog.coordinator.offsets_topic import DEFAULT_OFFSETS_TOPIC_PARTITIONS
from tierlog.storage.properties import whole_number

__all__ = ["GROUP_COORDINATOR_KEYS", "GroupCoordinatorConfig"]

# Key -> (default, smallest value allowed).
_NUMBERS: dict[str, tuple[int, int]] = {
    "offsets.topic.num.partitions": (DEFAULT_OFFSETS_TOPIC_PARTITIONS, 1),
    "offsets.topic.replication.factor": (3, 1),
    "offsets.topic.segment.bytes": (100 * 1024 * 1024, 1024),
    "offsets.retention.minutes": (7 * 24 * 60, 1),
    "offsets.retention.check.interval.ms": (600_000, 1),
    "offset.metadata.max.bytes": (4096, 0),
    "group.consumer.session.timeout.ms": (45_000, 1),
    "group.consumer.heartbeat.interval.ms": (5_000, 1),
    "group.consumer.max.size": (2**31 - 1, 1),
    "group.min.session.timeout.ms": (6_000, 1),
    "group.max.session.timeout.ms": (1_800_000, 1),
    "group.initial.rebalance.delay.ms": (3_000, 0),
}
GROUP_COORDINATOR_KEYS = frozenset(_NUMBERS)


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    offsets_topic_partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    offsets_retention_ms: int = 7 * 24 * 60 * 60_000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_max_size: int = 2**31 - 1
    classic_min_session_timeout_ms: int = 6_000
    classic_max_session_timeout_ms: int = 1_800_000
    classic_initial_rebalance_delay_ms: int = 3_000

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> GroupCoordinatorConfig:
        number = {key: whole_number(props, key, *bounds) for key, bounds in _NUMBERS.items()}
        return cls(
            offsets_topic_partitions=number["offsets.topic.num.partitions"],
            offsets_topic_replication_factor=number["offsets.topic.replication.factor"],
            offsets_topic_segment_bytes=number["offsets.topic.segment.bytes"],
            offsets_retention_ms=number["offsets.retention.minutes"] * 60_000,
            offsets_retention_check_interval_ms=number["offsets.retention.check.interval.ms"],
            offset_metadata_max_bytes=number["offset.metadata.max.bytes"],
            consumer_session_timeout_ms=number["group.consumer.session.timeout.ms"],
            consumer_heartbeat_interval_ms=number["group.consumer.heartbeat.interval.ms"],
            consumer_max_size=number["group.consumer.max.size"],
            classic_min_session_timeout_ms=number["group.min.session.timeout.ms"],
            classic_max_session_timeout_ms=number["group.max.session.timeout.ms"],
            classic_initial_rebalance_delay_ms=number["group.initial.rebalance.delay.ms"],
        )

    def offsets_topic_configs(self) -> dict[str, str]:
        """``__consumer_offsets``' topic configs, as Kafka's coordinator creates it."""
        return {
            "cleanup.policy": "compact",
            "segment.bytes": str(self.offsets_topic_segment_bytes),
            "compression.type": "producer",
        }
