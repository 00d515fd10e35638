"""The partition-state store on Kubernetes: the API server (etcd) decides.

One ConfigMap per cluster, ``<cluster>-partition-state``, holds every topic's partitions
under the topic's name (Kafka's topic characters are exactly a ConfigMap key's). Each
broker's lease is a ``coordination.k8s.io/v1`` Lease, ``<cluster>-broker-<id>``: its
``holderIdentity`` the incarnation, ``renewTime`` and ``leaseDurationSeconds`` as the
API defines them, ``leaseTransitions`` the broker epoch minus one (the times another
incarnation took it).

A change reads the object and writes it back with the ``resourceVersion`` it read: when
another writer got there first the API server answers 409 Conflict, and the change is
decided again on a fresh read. Every conflict means some other change landed, so the
writers as a whole always progress. One object for all topics keeps a topic's creation
and a partition's change equally simple; it holds some 10,000 partitions (a ConfigMap's
1 MiB), far more than a tierlog cluster serves today.
"""

from __future__ import annotations

import math
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

from tierlog.partition_state.model import (
    BrokerLease,
    configs_from_json,
    configs_to_json,
    topic_from_json,
    topic_to_json,
)
from tierlog.partition_state.store import LeaseChange, Partitions, PartitionStateStore, TopicChange
from tierlog.storage.errors import KafkaStorageError

__all__ = [
    "CLUSTER_LABEL",
    "KubeStateStore",
    "lease_name",
    "state_config_map_name",
    "topic_configs_map_name",
]

CLUSTER_LABEL = "tierlog.io/cluster"
_NOT_FOUND, _CONFLICT = 404, 409


def state_config_map_name(cluster: str) -> str:
    """The ConfigMap holding every topic's partition state."""
    return f"{cluster}-partition-state"


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
        self.config_map = state_config_map_name(cluster)
        self.configs_map = topic_configs_map_name(cluster)  # a topic's config overrides

    def list_topics(self) -> list[str]:
        found = self._get_config_map()
        return sorted((found.data or {}) if found is not None else {})

    def read_leases(self) -> dict[int, BrokerLease]:
        try:
            leases = self._client.list(
                Lease, namespace=self.namespace, labels={CLUSTER_LABEL: self.cluster}
            )
            return {lease.broker: lease for lease in map(_lease_value, leases)}
        except ApiError as error:
            raise self._unavailable("list the broker leases", error) from error

    def _read_topic(self, topic: str) -> Partitions | None:
        found = self._get_config_map()
        text = None if found is None else (found.data or {}).get(topic)
        return None if text is None else topic_from_json(text, self._where(topic))

    def _update_topic(self, topic: str, change: TopicChange) -> None:
        while True:
            found = self._get_config_map()
            data = dict((found.data or {}) if found is not None else {})
            text = data.get(topic)
            after = change(None if text is None else topic_from_json(text, self._where(topic)))
            if after is None:
                if text is None:
                    return
                del data[topic]
            else:
                data[topic] = topic_to_json(after)
            if self._write(found, data):
                return

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
            if self._write(found, data, self.configs_map):
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
            if self._put(found, Lease(metadata=self._metadata(name, broker), spec=spec)):
                return lease

    def _get_config_map(self, name: str | None = None) -> ConfigMap | None:
        name = name or self.config_map
        try:
            return self._client.get(ConfigMap, name, namespace=self.namespace)
        except ApiError as error:
            if error.status.code == _NOT_FOUND:
                return None
            raise self._unavailable(f"read ConfigMap {name}", error) from error

    def _write(
        self, found: ConfigMap | None, data: dict[str, str], name: str | None = None
    ) -> bool:
        wanted = ConfigMap(metadata=self._metadata(name or self.config_map), data=data)
        return self._put(found, wanted)

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

    def _metadata(self, name: str, broker: int | None = None) -> ObjectMeta:
        labels = {CLUSTER_LABEL: self.cluster}
        if broker is not None:
            labels["tierlog.io/broker"] = str(broker)
        return ObjectMeta(name=name, namespace=self.namespace, labels=labels)

    def _where(self, topic: str) -> str:
        return f"ConfigMap {self.namespace}/{self.config_map} key {topic!r}"

    def _unavailable(self, what: str, error: ApiError) -> KafkaStorageError:
        return KafkaStorageError(
            f"partition-state store: cannot {what} in {self.namespace}: {error.status.message}"
        )


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
