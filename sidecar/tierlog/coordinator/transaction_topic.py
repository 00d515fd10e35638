"""``__transaction_state`` and Kafka's rule for which of its partitions holds a transactional id.

As with groups and ``__consumer_offsets``, a transactional id lives in partition
``abs(transactionalId.hashCode()) % transaction.state.log.num.partitions`` (default 50),
with the same Java hash and Kafka ``abs``; its coordinator is that partition's leader.
"""

from __future__ import annotations

from tierlog.broker.internal_topics import TRANSACTION_STATE_TOPIC
from tierlog.coordinator.offsets_topic import java_string_hash, kafka_abs

__all__ = [
    "DEFAULT_TRANSACTION_TOPIC_PARTITIONS",
    "TRANSACTION_STATE_TOPIC",
    "partition_for_transactional_id",
]

DEFAULT_TRANSACTION_TOPIC_PARTITIONS = 50  # transaction.state.log.num.partitions


def partition_for_transactional_id(
    transactional_id: str, num_partitions: int = DEFAULT_TRANSACTION_TOPIC_PARTITIONS
) -> int:
    """The ``__transaction_state`` partition that holds ``transactional_id``."""
    if num_partitions < 1:
        raise ValueError(
            f"transaction.state.log.num.partitions must be at least 1, not {num_partitions}"
        )
    return kafka_abs(java_string_hash(transactional_id)) % num_partitions
