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
incarnation took it), and the label ``tierlog.io/in-controlled-shutdown: "true"`` once that
incarnation began its controlled shutdown, ``tierlog.io/released: "true"`` once it gave the
lease up at the end of it (``BrokerLease.released``: a label, as ``leaseDurationSeconds``
must stay positive; the holder and ``leaseTransitions`` stay, so the next incarnation
takes the next broker epoch).

A change reads the object and writes it back with the ``resourceVersion`` it read: when
another writer got there first the API server answers 409 Conflict, and the change is
decided again on a fresh read. Every conflict means some other change landed, so the
writers as a whole always progress.

What changed is journaled from a watch of those ConfigMaps (``kube_watch``), started at
the first ``topic_changes``; this store object's own writes go into the journal too, so
a broker that changed a topic sees it at its next poll, whatever the watch's delay.

Users' SCRAM credentials are one Secret, ``<cluster>-scram-credentials`` (type Opaque,
the document base64 under ``document``), changed by the same read and conditional write.
They hold salts, iterations and the derived StoredKey and ServerKey, never a password,
yet enough to impersonate the server and to test guessed passwords offline: hence a
Secret, which the namespace's readers of ConfigMaps cannot read, and which the brokers'
Role grants by name. The operator creates it (``render/rbac.py`` says why); an update
keeps the labels and owner it was given.

A topic's config overrides are ``<head>-configs``. Before parts, one ConfigMap,
``<cluster>-partition-state``, held every topic (some 10,000 partitions fit its 1 MiB)
and ``<cluster>-topic-configs`` every topic's overrides. ``adopt_single_config_maps``
moves their topics into objects of their own, unchanged (a version 1 document reads as
a head), and empties them by compare-and-swap, so a broker of the previous version still
running finds no topic there rather than acting on a copy that no longer changes.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Secret

from tierlog.broker.scram_credentials import CredentialDocument
from tierlog.partition_state.change_journal import ChangeCursor, ChangeJournal, TopicChanges
from tierlog.partition_state.kube_watch import RETRY_S, StateWatch
from tierlog.partition_state.model import BrokerLease, configs_from_json, configs_to_json
from tierlog.partition_state.store import HEAD, LeaseChange, PartChange, PartitionStateStore
from tierlog.storage.errors import KafkaStorageError

__all__ = [
    "CLUSTER_LABEL",
    "PARTITION_STATE_LABEL",
    "KubeStateStore",
    "lease_name",
    "part_config_map_name",
    "scram_credentials_secret_name",
    "single_config_map_name",
    "single_configs_map_name",
    "topic_configs_map_name",
]

CLUSTER_LABEL = "tierlog.io/cluster"
PARTITION_STATE_LABEL = "tierlog.io/partition-state"  # "head", "part" or "configs"
BROKER_LABEL = "tierlog.io/broker"  # on a broker's Lease: its id
# On a broker's Lease while its incarnation is in controlled shutdown (``BrokerLease``).
CONTROLLED_SHUTDOWN_LABEL = "tierlog.io/in-controlled-shutdown"
LOGS_LOST_LABEL = "tierlog.io/logs-lost"  # BrokerLease.logs_lost
RELEASED_LABEL = "tierlog.io/released"  # BrokerLease.released
_NOT_FOUND, _CONFLICT = 404, 409
_TOPIC_KEY, _PART_KEY, _CONFIGS_KEY = "topic", "part", "configs"
_NOT_IN_A_NAME = re.compile("[^a-z0-9-]")


def single_config_map_name(cluster: str) -> str:
    """The ConfigMap that held every topic's partition state before parts."""
    return f"{cluster}-partition-state"


def single_configs_map_name(cluster: str) -> str:
    """The ConfigMap that held every topic's config overrides before parts."""
    return f"{cluster}-topic-configs"


def part_config_map_name(cluster: str, topic: str, index: int, topic_id: str) -> str:
    """The ConfigMap of the topic's part ``index`` (``topic_id`` names the parts after
    the head)."""
    head = _topic_object_name(cluster, topic)
    return head if index == HEAD else f"{head}-{topic_id}-{index}"


def topic_configs_map_name(cluster: str, topic: str) -> str:
    """The ConfigMap of the topic's config overrides."""
    return f"{_topic_object_name(cluster, topic)}-configs"


def _topic_object_name(cluster: str, topic: str) -> str:
    """Kafka's topic names allow capitals and ``_``, a ConfigMap's do not: the slug is
    for people, the hash of the exact name keeps ``A`` and ``a`` apart."""
    slug = _NOT_IN_A_NAME.sub("-", topic.lower())[:60]
    digest = hashlib.sha256(topic.encode()).hexdigest()[:12]
    return f"{cluster}-state-{slug}-{digest}"


def scram_credentials_secret_name(cluster: str) -> str:
    """The Secret of the cluster's users' SCRAM credentials."""
    return f"{cluster}-scram-credentials"


def lease_name(cluster: str, broker: int) -> str:
    return f"{cluster}-broker-{broker}"


class KubeStateStore(PartitionStateStore):
    def __init__(
        self,
        client: Client,
        namespace: str,
        cluster: str,
        clock: Callable[[], float] = time.time,
        watch_retry_s: float = RETRY_S,
    ) -> None:
        super().__init__(clock)
        self._watch_retry_s = watch_retry_s
        self._client = client
        self.namespace = namespace
        self.cluster = cluster
        self._changes = ChangeJournal()
        self._watch: StateWatch | None = None
        self._starting_watch = threading.Lock()

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

    def topic_changes(self, since: ChangeCursor | None) -> TopicChanges:
        with self._starting_watch:
            if self._watch is None:
                watch = StateWatch(
                    self._watch_client,
                    self.namespace,
                    {CLUSTER_LABEL: self.cluster},
                    ("head", "part", "configs"),
                    PARTITION_STATE_LABEL,
                    _TOPIC_KEY,
                    self._changes,
                    self._watch_retry_s,
                )
                try:
                    watch.start()
                except ApiError as error:
                    raise self._unavailable("list the partition state", error) from error
                self._watch = watch
        return self._changes.since(since)

    def watch_changes(self, changed: Callable[[], None]) -> Callable[[], None]:
        """Called as the watch journals a change (in its thread), or as this store
        object does."""
        return self._changes.listen(changed)

    def _watch_client(self) -> Client:
        """The watch's own client, as the store's: a watch holds its connection for
        minutes, and whatever befalls it must not take the store's calls' (the lease's)."""
        return Client(self._client.config)

    def close(self) -> None:
        with self._starting_watch:
            if self._watch is not None:
                self._watch.close()

    @property
    def watch_failures(self) -> int:
        """How many times the watch of this store's ConfigMaps failed (refused, 410 Gone,
        the server away): each time, its readers read everything until it is back."""
        return 0 if self._watch is None else self._watch.failures

    def scram_credentials(self) -> CredentialDocument:
        return _SecretDocument(self, scram_credentials_secret_name(self.cluster))

    def _read_part(self, topic: str, index: int, topic_id: str) -> str | None:
        name = part_config_map_name(self.cluster, topic, index, topic_id)
        return _text(self._get_config_map(name), topic, _PART_KEY)

    def _update_part(self, topic: str, index: int, topic_id: str, change: PartChange) -> None:
        name = part_config_map_name(self.cluster, topic, index, topic_id)
        kind = "head" if index == HEAD else "part"
        if self._update_object(name, kind, topic, _PART_KEY, change):
            self.part_writes += 1

    def _read_configs(self, topic: str) -> dict[str, str] | None:
        name = topic_configs_map_name(self.cluster, topic)
        text = _text(self._get_config_map(name), topic, _CONFIGS_KEY)
        return None if text is None else configs_from_json(text, f"ConfigMap {name}")

    def _write_configs(self, topic: str, configs: dict[str, str] | None) -> None:
        text = None if configs is None else configs_to_json(configs)
        name = topic_configs_map_name(self.cluster, topic)
        self._update_object(name, "configs", topic, _CONFIGS_KEY, lambda _: text)

    def adopt_single_config_maps(self) -> list[str]:
        """Move the topics of the ConfigMaps that held them all before parts (their
        partitions, their config overrides) into objects of their own; the topics whose
        partitions moved."""
        moved = self._adopt(single_config_map_name(self.cluster), "head", _PART_KEY, HEAD)
        self._adopt(single_configs_map_name(self.cluster), "configs", _CONFIGS_KEY, None)
        return moved

    def _adopt(self, old_name: str, kind: str, key: str, index: int | None) -> list[str]:
        """Copy each topic's document of ``old_name`` into its own object, then empty it
        by compare-and-swap; the topics copied. A topic that has an object already keeps
        it, unless it is the copy this call made and the old ConfigMap changed since (a
        broker of the previous version wrote it): then the newer document goes over it."""
        copied: dict[str, str] = {}
        while True:
            found = self._get_config_map(old_name)
            old = dict((found.data or {}) if found is not None else {})
            if not old:
                return sorted(copied)
            for topic, text in sorted(old.items()):
                name = (
                    topic_configs_map_name(self.cluster, topic)
                    if index is None
                    else part_config_map_name(self.cluster, topic, index, "")
                )
                self._update_object(name, kind, topic, key, _adopt(text, copied.get(topic)))
                copied[topic] = text
            if self._put(found, ConfigMap(metadata=self._metadata(old_name), data={})):
                return sorted(copied)

    def _update_object(
        self, name: str, kind: str, topic: str, key: str, change: PartChange
    ) -> bool:
        """Apply ``change`` to the document under ``key`` of the topic's ConfigMap
        ``name`` (labelled ``kind``); whether it wrote."""
        while True:
            found = self._get_config_map(name)
            text = _text(found, topic, key)
            after = change(text)
            if after == text:
                return False
            if after is None:
                self._delete_config_map(name)
                self._changes.record(topic)
                return True
            wanted = ConfigMap(
                metadata=self._metadata(name, labels={PARTITION_STATE_LABEL: kind}),
                data={_TOPIC_KEY: topic, key: after},
            )
            if self._put(found, wanted):
                self._changes.record(topic)
                return True

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
            labels = {BROKER_LABEL: str(broker)}
            if lease.in_controlled_shutdown:
                labels[CONTROLLED_SHUTDOWN_LABEL] = "true"
            if lease.logs_lost:
                labels[LOGS_LOST_LABEL] = "true"
            if lease.released:
                labels[RELEASED_LABEL] = "true"
            metadata = self._metadata(name, labels)
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

    def _get_secret(self, name: str) -> Secret | None:
        try:
            return self._client.get(Secret, name, namespace=self.namespace)
        except ApiError as error:
            if error.status.code == _NOT_FOUND:
                return None
            raise self._unavailable(f"read Secret {name}", error) from error

    def _put(
        self, found: ConfigMap | Lease | Secret | None, wanted: ConfigMap | Lease | Secret
    ) -> bool:
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

    def _unavailable(self, what: str, error: ApiError) -> KafkaStorageError:
        return KafkaStorageError(
            f"partition-state store: cannot {what} in {self.namespace}: {error.status.message}"
        )


class _SecretDocument:
    """A document in one Secret of the store's, base64 under ``document`` as a Secret's
    data is."""

    _KEY = "document"

    def __init__(self, store: KubeStateStore, name: str) -> None:
        self._store = store
        self.name = name

    def read(self) -> str | None:
        return _secret_text(self._store._get_secret(self.name), self._KEY)

    def update(self, change: Callable[[str | None], str]) -> None:
        while True:
            found = self._store._get_secret(self.name)
            text = _secret_text(found, self._KEY)
            after = change(text)
            if after == text:
                return
            encoded = base64.b64encode(after.encode()).decode()
            wanted = Secret(
                metadata=self._kept_metadata(found), type="Opaque", data={self._KEY: encoded}
            )
            if self._store._put(found, wanted):
                return

    def _kept_metadata(self, found: Secret | None) -> ObjectMeta:
        """A replace drops what it does not name: the labels and owner the operator
        gave the Secret are written back with it."""
        if found is None or found.metadata is None:
            return self._store._metadata(self.name)
        return ObjectMeta(
            name=self.name,
            namespace=self._store.namespace,
            labels=found.metadata.labels,
            annotations=found.metadata.annotations,
            ownerReferences=found.metadata.ownerReferences,
        )


def _secret_text(found: Secret | None, key: str) -> str | None:
    encoded = None if found is None else (found.data or {}).get(key)
    return None if encoded is None else base64.b64decode(encoded).decode()


def _text(found: ConfigMap | None, topic: str, key: str) -> str | None:
    """The document under ``key`` of a topic's ConfigMap (None: no such ConfigMap)."""
    if found is None:
        return None
    data = found.data or {}
    if data.get(_TOPIC_KEY) != topic:
        assert found.metadata is not None
        raise KafkaStorageError(
            f"ConfigMap {found.metadata.name} holds the partition state of "
            f"{data.get(_TOPIC_KEY)!r}, not of {topic!r}"
        )
    return data.get(key)


def _adopt(text: str, copied_before: str | None) -> PartChange:
    """Copy ``text`` into an object that is absent, or still the copy made before."""

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
        int(lease.metadata.labels[BROKER_LABEL]),
        spec.holderIdentity or "",
        renewed,
        float(spec.leaseDurationSeconds or 0),
        (spec.leaseTransitions or 0) + 1,
        lease.metadata.labels.get(CONTROLLED_SHUTDOWN_LABEL) == "true",
        lease.metadata.labels.get(LOGS_LOST_LABEL) == "true",
        lease.metadata.labels.get(RELEASED_LABEL) == "true",
    )
