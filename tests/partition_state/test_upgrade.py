"""State the version before parts left (a version 1 document per topic holding all its
partitions, and the topics' config overrides) is read on, changed and grown in parts, on
both stores: the directory as it is, the one ConfigMap of a cluster once adopted."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.state_stores import write_previous_layout
from tierlog.partition_state.kube_store import KubeStateStore
from tierlog.partition_state.model import PartitionState
from tierlog.partition_state.store import PartitionStateStore

OpenStore = Callable[..., tuple[PartitionStateStore, str, str]]


def test_state_of_the_previous_layout_reads_on_changes_and_grows_in_parts(
    store_at: OpenStore,
) -> None:
    store, kind, where = store_at()
    orders = {p: PartitionState((1, 2), 1 + p % 2, 4, (1, 2), 7) for p in range(1200)}
    audit = {0: PartitionState.new((3,))}
    overrides = {"retention.ms": "60000"}
    write_previous_layout(kind, where, {"orders": orders, "audit": audit}, {"orders": overrides})
    if isinstance(store, KubeStateStore):
        assert store.adopt_single_config_maps() == ["audit", "orders"]
        assert store.adopt_single_config_maps() == []  # emptied: adopted once

    assert store.list_topics() == ["audit", "orders"]
    assert store.read_topic("orders") == orders  # 1,200: its head keeps them all
    shrunk = store.alter_partition("orders", 1100, 7, orders[1100].with_isr((1,)))
    added = {p: PartitionState.new((2, 1)) for p in range(1200, 2500)}
    store.add_partitions("orders", added)

    again, _, _ = store_at()
    assert again.read_topic("orders") == {**orders, 1100: shrunk, **added}
    assert again.read_topic("audit") == audit
    assert again.read_topic_configs("orders") == overrides
    again.delete_topic("orders")
    assert store.list_topics() == ["audit"]
    assert store.read_topic_configs("orders") == {}
