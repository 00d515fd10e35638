"""What a broker reads of the partition-state store on each poll (``state_poll_ms``).

Every topic's partitions and config overrides, and every broker's lease: the whole
store, read again each time. Its cost grows with the cluster's partitions, times the
brokers, times the polls a second (docs/SCALE.md measures it); it is one function so
the scale simulation (tests/benchmarks/scale_sim.py) reads exactly what a broker reads.
"""

from __future__ import annotations

import contextlib

from tierlog.partition_state.model import BrokerLease, PartitionState
from tierlog.partition_state.store import PartitionStateStore
from tierlog.storage.errors import TierlogError

__all__ = ["StoreView", "TopicView", "read_store_view"]

TopicView = tuple[dict[int, PartitionState], dict[str, str]]  # partitions, config overrides
StoreView = tuple[dict[str, TopicView], dict[int, BrokerLease]]  # topics, leases


def read_store_view(store: PartitionStateStore) -> StoreView:
    """Each topic's partitions and configs (a topic deleted meanwhile is left out), and
    the leases."""
    topics = {}
    for topic in store.list_topics():
        with contextlib.suppress(TierlogError):  # deleted meanwhile
            topics[topic] = (store.read_topic(topic), store.read_topic_configs(topic))
    return topics, store.read_leases()
