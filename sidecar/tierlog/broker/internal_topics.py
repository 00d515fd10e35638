"""The topics only the broker's coordinators write, under Kafka's names.

They sit here, below the coordinators that own them, because the broker core's rules
for topics (what a client may write, what may be tiered) and the front doors (what
Metadata calls internal) need their names too.
"""

from __future__ import annotations

__all__ = ["INTERNAL_TOPICS", "OFFSETS_TOPIC", "TRANSACTION_STATE_TOPIC"]

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
