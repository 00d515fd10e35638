"""The partition-state store on Kubernetes: the API server (etcd) decides.

A topic's partitions are ConfigMaps of their own, one per part (``store``): the head
``<cluster>-state-<slug>-<hash>`` (the slug is the topic's name made a DNS label, the
hash of the exact name keeps two names apart) and ``<head>-<topic id>-<part>`` after it,
each with the topic's name and the part's document in ``data``, labelled with the cluster
and ``tierlog.io/partition-state: head|part``. A ConfigMap holds at most 1 MiB: a part
of 1,000 partitions of three replicas is some 150 KB, so no object grows with the
cluster. Each broker's lease is a ``coordination.k8s.io/v1`` Lease, ``<cluster>-broker-<id>``: its
``holderIdentity`` the incarnation, ``renewTime`` and ``leaseDurationSeconds`` as the
API defines them, ``leaseTransitions`` the broker epoch minus one (the times another
incarnation took it).

A change reads the object and writes it back with the ``resourceVersion`` it read: when
another writer got there first the API server answers 409 Conflict, and the change is
decided again on a fresh read. Every conflict means some other change landed, so the
writers as a whole always progress.

Before parts, one ConfigMap, ``<cluster>-partition-state``, held every topic (some
10,000 partitions fit its 1 MiB). ``adopt_single_config_map`` moves its topics into
heads of their own, unchanged (a version 1 document reads as a head), and empties it by
compare-and-swap, so a broker of the previous version still running finds no topic
there rather than acting on a copy that no longer changes.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap

from tierlog.partition_state.model import BrokerLease, configs_from_json, configs_to_json
from tierlog.partition_state.store import HEAD, LeaseChange, PartChange, PartitionStateStore
from tierlog.storage.errors import KafkaStorageError

__all__ = [
    "CLUSTER_LABEL",
    "PARTITION_STATE_LABEL",
    "KubeStateStore",
    "lease_name",
    "part_config_map_name",
    "single_config_map_name",
    "topic_configs_map_name",
]

CLUSTER_LABEL = "tierlog.io/cluster"
PARTITION_STATE_LABEL = "tierlog.io/partition-state"  # "head" or "part"
_NOT_FOUND, _CONFLICT = 404, 409
_TOPIC_KEY, _PART_KEY = "topic", "part"
_NOT_IN_A_NAME = re.compile("[^a-z0-9-]")


def single_config_map_name(cluster: str) -> str:
    """The ConfigMap that held every topic's partition state before parts."""
    return f"{cluster}-partition-state"


def part_config_map_name(cluster: str, topic: str, index: int, topic_id: str) -> str:
    """The ConfigMap of the topic's part ``index`` (``topic_id`` names the parts after
    the head). Kafka's topic names allow capitals and ``_``, a ConfigMap's do not: the
    slug is for people, the hash of the exact name keeps ``A`` and ``a`` apart."""
    slug = _NOT_IN_A_NAME.sub("-", topic.lower())[:60]
    digest = hashlib.sha256(topic.encode()).hexdigest()[:12]
    head = f"{cluster}-state-{slug}-{digest}"
    return head if index == HEAD else f"{head}-{topic_id}-{index}"


def topic_configs_map_name(cluster: str) -> str:
    """The ConfigMap holding every topic's config overrides."""
    return f"{cluster}-topic-configs"


def lease_name(cluster: str, broker: int) -> str:
    return f"{cluster}-broker-{broker}"


class KubeStateStore(PartitionStateStore):
    def __init__(
        self,
        client: Client,
        namespace: str,
        cluster: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock)
        self._client = client
        self.namespace = namespace
        self.cluster = cluster
        self.configs_map = topic_configs_map_name(cluster)  # a topic's config overrides

    def list_topics(self) -> list[str]:
        try:
            heads = self._client.list(
                ConfigMap,
                namespace=self.namespace,
                labels={CLUSTER_LABEL: self.cluster, PARTITION_STATE_LABEL: "head"},
            )
            return sorted((head.data or {}).get(_TOPIC_KEY, "") for head in heads)
        except ApiError as error:
            raise self._unavailable("list the topics' partition state", error) from error

    def read_leases(self) -> dict[int, BrokerLease]:
        try:
            leases = self._client.list(
                Lease, namespace=self.namespace, labels={CLUSTER_LABEL: self.cluster}
            )
            return {lease.broker: lease for lease in map(_lease_value, leases)}
        except ApiError as error:
            raise self._unavailable("list the broker leases", error) from error

    def _read_part(self, topic: str, index: int, topic_id: str) -> str | None:
        name = part_config_map_name(self.cluster, topic, index, topic_id)
        return _part_text(self._get_config_map(name), topic)

    def _update_part(self, topic: str, index: int, topic_id: str, change: PartChange) -> None:
        name = part_config_map_name(self.cluster, topic, index, topic_id)
        while True:
            found = self._get_config_map(name)
            text = _part_text(found, topic)
            after = change(text)
            if after == text:
                return
            self.part_writes += 1
            if after is None:
                self._delete_config_map(name)
                return
            kind = "head" if index == HEAD else "part"
            wanted = ConfigMap(
                metadata=self._metadata(name, labels={PARTITION_STATE_LABEL: kind}),
                data={_TOPIC_KEY: topic, _PART_KEY: after},
            )
            if self._put(found, wanted):
                return

    def adopt_single_config_map(self) -> list[str]:
        """Move the topics of the ConfigMap that held them all (before parts) into heads
        of their own, then empty it by compare-and-swap; the topics moved. A topic that
        has a head already keeps it, unless it is the copy this call made and the old
        ConfigMap changed since (a broker of the previous version wrote it): then the
        newer document is copied over it."""
        name = single_config_map_name(self.cluster)
        copied: dict[str, str] = {}
        while True:
            found = self._get_config_map(name)
            old = dict((found.data or {}) if found is not None else {})
            if not old:
                return sorted(copied)
            for topic, text in sorted(old.items()):
                self._update_part(topic, HEAD, "", _adopt(text, copied.get(topic)))
                copied[topic] = text
            if self._put(found, ConfigMap(metadata=self._metadata(name), data={})):
                return sorted(copied)

    def _read_configs(self, topic: str) -> dict[str, str] | None:
        found = self._get_config_map(self.configs_map)
        text = None if found is None else (found.data or {}).get(topic)
        return None if text is None else configs_from_json(text, self._where(topic))

    def _write_configs(self, topic: str, configs: dict[str, str] | None) -> None:
        while True:
            found = self._get_config_map(self.configs_map)
            data = dict((found.data or {}) if found is not None else {})
            if configs is not None:
                data[topic] = configs_to_json(configs)
            elif data.pop(topic, None) is None:
                return
            wanted = ConfigMap(metadata=self._metadata(self.configs_map), data=data)
            if self._put(found, wanted):
                return

    def _update_lease(self, broker: int, change: LeaseChange) -> BrokerLease:
        name = lease_name(self.cluster, broker)
        while True:
            try:
                found: Lease | None = self._client.get(Lease, name, namespace=self.namespace)
            except ApiError as error:
                if error.status.code != _NOT_FOUND:
                    raise self._unavailable(f"read Lease {name}", error) from error
                found = None
            lease = change(None if found is None else _lease_value(found))
            renewed = _micro_time(lease.renewed_at)
            lease = replace(lease, renewed_at=renewed.timestamp())
            spec = LeaseSpec(
                holderIdentity=lease.holder,
                renewTime=renewed,
                leaseDurationSeconds=math.ceil(lease.duration_s),
                leaseTransitions=lease.broker_epoch - 1,
            )
            metadata = self._metadata(name, {"tierlog.io/broker": str(broker)})
            if self._put(found, Lease(metadata=metadata, spec=spec)):
                return lease

    def _get_config_map(self, name: str) -> ConfigMap | None:
        try:
            return self._client.get(ConfigMap, name, namespace=self.namespace)
        except ApiError as error:
            if error.status.code == _NOT_FOUND:
                return None
            raise self._unavailable(f"read ConfigMap {name}", error) from error

    def _delete_config_map(self, name: str) -> None:
        try:
            self._client.delete(ConfigMap, name, namespace=self.namespace)
        except ApiError as error:
            if error.status.code != _NOT_FOUND:  # gone already: what was wanted
                raise self._unavailable(f"delete ConfigMap {name}", error) from error

    def _put(self, found: ConfigMap | Lease | None, wanted: ConfigMap | Lease) -> bool:
        """Create ``wanted``, or replace ``found`` with it at the version read; False when
        another writer got there first (409), so the caller decides again."""
        assert wanted.metadata is not None
        try:
            if found is None:
                self._client.create(wanted, namespace=self.namespace)
            else:
                assert found.metadata is not None
                wanted.metadata.resourceVersion = found.metadata.resourceVersion
                self._client.replace(wanted)
            return True
        except ApiError as error:
            if error.status.code == _CONFLICT:
                return False
            raise self._unavailable(f"write {wanted.metadata.name}", error) from error

    def _metadata(self, name: str, labels: dict[str, str] | None = None) -> ObjectMeta:
        all_labels = {CLUSTER_LABEL: self.cluster, **(labels or {})}
        return ObjectMeta(name=name, namespace=self.namespace, labels=all_labels)

    def _where(self, topic: str) -> str:
        return f"ConfigMap {self.namespace}/{self.configs_map} key {topic!r}"

    def _unavailable(self, what: str, error: ApiError) -> KafkaStorageError:
        return KafkaStorageError(
            f"partition-state store: cannot {what} in {self.namespace}: {error.status.message}"
        )


def _part_text(found: ConfigMap | None, topic: str) -> str | None:
    if found is None:
        return None
    data = found.data or {}
    if data.get(_TOPIC_KEY) != topic:
        assert found.metadata is not None
        raise KafkaStorageError(
            f"ConfigMap {found.metadata.name} holds the partition state of "
            f"{data.get(_TOPIC_KEY)!r}, not of {topic!r}"
        )
    return data.get(_PART_KEY)


def _adopt(text: str, copied_before: str | None) -> PartChange:
    """Copy ``text`` into a head that is absent, or still the copy made before."""

    def adopt(current: str | None) -> str | None:
        return text if current is None or current == copied_before else current

    return adopt


def _micro_time(seconds: float) -> datetime:
    """``seconds`` as a Lease's MicroTime. lightkube writes a whole second without its
    ``.000000``, which the API server refuses for a MicroTime: such a time moves on by
    one microsecond."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment if moment.microsecond else moment.replace(microsecond=1)


def _lease_value(lease: Lease) -> BrokerLease:
    assert lease.metadata is not None and lease.metadata.labels is not None
    spec = lease.spec or LeaseSpec()
    renewed = spec.renewTime.timestamp() if spec.renewTime is not None else 0.0
    return BrokerLease(
        int(lease.metadata.labels["tierlog.io/broker"]),
        spec.holderIdentity or "",
        renewed,
        float(spec.leaseDurationSeconds or 0),
        (spec.leaseTransitions or 0) + 1,
    )
