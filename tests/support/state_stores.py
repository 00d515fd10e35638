"""The two partition-state stores as tests open them, by a name a subprocess can be given.

``open_store("local", DIR)`` is a ``LocalStateStore`` on that directory;
``open_store("kube", "KUBECONFIG NAMESPACE CLUSTER")`` a ``KubeStateStore`` through the
API server the kubeconfig names. ``python -m tests.support.state_stores race KIND WHERE
TOPIC PARTITION COUNT`` is one racing writer (``tests/partition_state/test_races.py``): it
bumps the partition's leader epoch ``COUNT`` times, each a compare-and-swap retried on
``INVALID_UPDATE_VERSION``, and prints one JSON line per success: the partition epoch
the store gave it and how many races it lost first.

``write_previous_layout`` leaves the state as the version before parts did: a version 1
document per topic holding all its partitions, a file per topic or a key per topic of
one ConfigMap per cluster, and the topics' config overrides likewise.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from lightkube import Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

from tierlog.api.errors import InvalidUpdateVersionError
from tierlog.partition_state.kube_store import (
    CLUSTER_LABEL,
    KubeStateStore,
    single_config_map_name,
    single_configs_map_name,
)
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import PartitionState, configs_to_json
from tierlog.partition_state.store import PartitionStateStore

__all__ = ["StoreReads", "count_reads", "open_store", "race", "write_previous_layout"]

# What a store reads: documents, lists, and the journal of what changed.
_READS = ("_read_part", "_read_configs", "list_topics", "read_leases", "topic_changes")


class StoreReads:
    """The reads a real store made, by method, since ``reset``."""

    def __init__(self) -> None:
        self.by_method: dict[str, int] = {}

    @property
    def total(self) -> int:
        return sum(self.by_method.values())

    def reset(self) -> None:
        self.by_method = {}


def count_reads(store: PartitionStateStore) -> StoreReads:
    """Count every read ``store`` makes from now on: its own read methods, wrapped on
    this object, each still reading the real store."""
    reads = StoreReads()
    for name in _READS:
        method = getattr(store, name, None)
        if method is not None:
            setattr(store, name, _counted(reads, name, method))
    return reads


def _counted(reads: StoreReads, name: str, method: Callable[..., object]) -> Callable[..., object]:
    def counted(*args: object) -> object:
        reads.by_method[name] = reads.by_method.get(name, 0) + 1
        return method(*args)

    return counted


def open_store(
    kind: str, where: str, clock: Callable[[], float] = time.time
) -> PartitionStateStore:
    if kind == "local":
        return LocalStateStore(Path(where), clock)
    kubeconfig, namespace, cluster = where.split()
    client = Client(KubeConfig.from_file(kubeconfig), field_manager="tierlog-tests")
    return KubeStateStore(client, namespace, cluster, clock)


def write_previous_layout(
    kind: str,
    where: str,
    topics: dict[str, dict[int, PartitionState]],
    configs: dict[str, dict[str, str]],
) -> None:
    documents = {topic: _version_1_document(partitions) for topic, partitions in topics.items()}
    overrides = {topic: configs_to_json(topic_configs) for topic, topic_configs in configs.items()}
    if kind == "local":
        for folder, written in (("topics", documents), ("configs", overrides)):
            (Path(where) / folder).mkdir(parents=True, exist_ok=True)
            for topic, text in written.items():
                (Path(where) / folder / f"{topic}.json").write_text(text)
        return
    kubeconfig, namespace, cluster = where.split()
    client = Client(KubeConfig.from_file(kubeconfig), field_manager="tierlog-tests")
    for name, data in (
        (single_config_map_name(cluster), documents),
        (single_configs_map_name(cluster), overrides),
    ):
        metadata = ObjectMeta(name=name, namespace=namespace, labels={CLUSTER_LABEL: cluster})
        client.create(ConfigMap(metadata=metadata, data=data))


def _version_1_document(partitions: dict[int, PartitionState]) -> str:
    fields = {
        str(partition): {
            "replicas": list(state.replicas),
            "leader": state.leader,
            "leaderEpoch": state.leader_epoch,
            "isr": list(state.isr),
            "partitionEpoch": state.partition_epoch,
        }  # no addingReplicas / removingReplicas: the oldest documents lack them
        for partition, state in partitions.items()
    }
    return json.dumps({"version": 1, "partitions": fields})


def race(store: PartitionStateStore, topic: str, partition: int, count: int) -> None:
    for _ in range(count):
        lost = 0
        while True:
            current = store.read_topic(topic)[partition]
            try:
                stored = store.alter_partition(
                    topic, partition, current.partition_epoch, current.with_leader(current.leader)
                )
                break
            except InvalidUpdateVersionError:
                lost += 1
        print(json.dumps({"partition_epoch": stored.partition_epoch, "lost": lost}), flush=True)


if __name__ == "__main__":
    _, command, kind, where, topic, partition, count = sys.argv
    assert command == "race", command
    race(open_store(kind, where), topic, int(partition), int(count))
