"""The transaction coordinator's broker configs, under Kafka's names and with Kafka's defaults.

``transaction.state.log.num.partitions`` (50), ``transaction.state.log.replication.factor``
(3, capped to the brokers there are) and ``transaction.state.log.segment.bytes`` (100 MiB)
shape ``__transaction_state`` when it is created on first use. A producer's
``transaction.timeout.ms`` may not exceed ``transaction.max.timeout.ms`` (15 minutes);
every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (10 s) a transaction
open longer than its timeout is aborted, its producer fenced.
``transaction.partition.verification.enable`` (true, KIP-890) makes a partition's leader
ask the coordinator before the batch that opens a transaction there is appended; off,
such a batch is appended unasked, as before KIP-890 (how a hanging transaction is made
on purpose, to try ``kafka-transactions find-hanging`` and ``abort``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tierlog.coordinator.transaction_topic import DEFAULT_TRANSACTION_TOPIC_PARTITIONS
from tierlog.storage.properties import flag, whole_number

__all__ = ["TRANSACTION_COORDINATOR_KEYS", "TransactionCoordinatorConfig"]

# Key -> (default, smallest value allowed).
_NUMBERS: dict[str, tuple[int, int]] = {
    "transaction.state.log.num.partitions": (DEFAULT_TRANSACTION_TOPIC_PARTITIONS, 1),
    "transaction.state.log.replication.factor": (3, 1),
    "transaction.state.log.segment.bytes": (100 * 1024 * 1024, 1024),
    "transaction.max.timeout.ms": (900_000, 1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (10_000, 1),
}
_VERIFICATION = "transaction.partition.verification.enable"
TRANSACTION_COORDINATOR_KEYS = frozenset((*_NUMBERS, _VERIFICATION))


@dataclass(frozen=True)
class TransactionCoordinatorConfig:
    topic_partitions: int = DEFAULT_TRANSACTION_TOPIC_PARTITIONS
    topic_replication_factor: int = 3
    topic_segment_bytes: int = 100 * 1024 * 1024
    max_timeout_ms: int = 900_000
    abort_timed_out_interval_ms: int = 10_000
    partition_verification: bool = True

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TransactionCoordinatorConfig:
        number = {key: whole_number(props, key, *bounds) for key, bounds in _NUMBERS.items()}
        return cls(
            topic_partitions=number["transaction.state.log.num.partitions"],
            topic_replication_factor=number["transaction.state.log.replication.factor"],
            topic_segment_bytes=number["transaction.state.log.segment.bytes"],
            max_timeout_ms=number["transaction.max.timeout.ms"],
            abort_timed_out_interval_ms=number[
                "transaction.abort.timed.out.transaction.cleanup.interval.ms"
            ],
            partition_verification=flag(props, _VERIFICATION, default=True),
        )

    def topic_configs(self) -> dict[str, str]:
        """``__transaction_state``'s topic configs, as Kafka's coordinator creates it."""
        return {
            "cleanup.policy": "compact",
            "segment.bytes": str(self.topic_segment_bytes),
            "compression.type": "uncompressed",
        }
