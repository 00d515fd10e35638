"""How a broker replicates: where the partition-state store is, and Kafka's replica configs.

Replication is on when the broker is given a partition-state store: for a cluster of
processes on one machine, a directory every broker shares
(``tierlog.replication.state.dir``, a ``LocalStateStore``); on Kubernetes, the API
server (``tierlog.replication.state.store=kubernetes`` with
``tierlog.replication.state.namespace`` and ``tierlog.replication.state.cluster``, a
``KubeStateStore`` reached with the pod's service account). The rest are Kafka's broker
configs under Kafka's names and defaults: ``replica.lag.time.max.ms`` (how long a
follower may lag before it leaves the ISR), ``replica.fetch.*`` (the follower's
fetches), ``broker.session.timeout.ms`` (how long a broker's lease lasts unrenewed
before a controller fences it) and ``auto.leader.rebalance.enable`` (preferred leaders
lead again once back in sync).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.replication.fetcher import FetchSettings
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.properties import flag, whole_number

__all__ = [
    "REPLICATION_KEYS",
    "DirectoryStore",
    "KubernetesStore",
    "ReplicationConfig",
    "StoreLocation",
]

STATE_STORE = "tierlog.replication.state.store"  # directory (the default) | kubernetes
STATE_DIR = "tierlog.replication.state.dir"
STATE_NAMESPACE = "tierlog.replication.state.namespace"
STATE_CLUSTER = "tierlog.replication.state.cluster"
AUTO_LEADER_REBALANCE = "auto.leader.rebalance.enable"
# Read the store as soon as it says it changed (``watch_changes``), beside the polls;
# off: the polls alone (a broker that must stay a poll behind the store).
STATE_WATCH = "tierlog.replication.state.watch"
# Key -> (default, smallest value allowed).
_NUMBERS: dict[str, tuple[int, int]] = {
    "replica.lag.time.max.ms": (30_000, 1),
    "replica.fetch.wait.max.ms": (500, 0),
    "replica.fetch.min.bytes": (1, 1),
    "replica.fetch.max.bytes": (1024 * 1024, 1),
    "replica.fetch.response.max.bytes": (10 * 1024 * 1024, 1),
    "replica.fetch.backoff.ms": (1000, 0),
    "broker.session.timeout.ms": (9000, 1),
    "tierlog.replication.state.poll.ms": (100, 1),
}
REPLICATION_KEYS = frozenset(
    {
        STATE_STORE,
        STATE_DIR,
        STATE_NAMESPACE,
        STATE_CLUSTER,
        STATE_WATCH,
        AUTO_LEADER_REBALANCE,
        *_NUMBERS,
    }
)


@dataclass(frozen=True)
class DirectoryStore:
    """A ``LocalStateStore``: a directory every broker of the machine shares."""

    directory: Path


@dataclass(frozen=True)
class KubernetesStore:
    """A ``KubeStateStore``: the cluster's ConfigMap and Leases in ``namespace``."""

    namespace: str
    cluster: str


StoreLocation = DirectoryStore | KubernetesStore


@dataclass(frozen=True)
class ReplicationConfig:
    store: StoreLocation
    replica_lag_time_max_ms: int = 30_000
    broker_session_timeout_ms: int = 9000
    state_poll_ms: int = 100  # how often the partition-state store is read
    state_watch: bool = True  # and as soon as it says it changed (``STATE_WATCH``)
    # Preferred leaders lead again once back in sync (Kafka's auto.leader.rebalance.enable).
    auto_leader_rebalance: bool = True
    fetch: FetchSettings = field(default_factory=FetchSettings)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ReplicationConfig | None:
        """The settings, or None when no partition-state store is named (no replication:
        each partition lives on its one owner)."""
        values = {key: whole_number(props, key, *limits) for key, limits in _NUMBERS.items()}
        store = _store_location(props)
        if store is None:
            return None
        return cls(
            store=store,
            replica_lag_time_max_ms=values["replica.lag.time.max.ms"],
            broker_session_timeout_ms=values["broker.session.timeout.ms"],
            state_poll_ms=values["tierlog.replication.state.poll.ms"],
            state_watch=flag(props, STATE_WATCH, default=True),
            auto_leader_rebalance=flag(props, AUTO_LEADER_REBALANCE, default=True),
            fetch=FetchSettings(
                max_wait_ms=values["replica.fetch.wait.max.ms"],
                min_bytes=values["replica.fetch.min.bytes"],
                max_bytes=values["replica.fetch.response.max.bytes"],
                partition_max_bytes=values["replica.fetch.max.bytes"],
                backoff_ms=values["replica.fetch.backoff.ms"],
            ),
        )


def _store_location(props: Mapping[str, str]) -> StoreLocation | None:
    kind = props.get(STATE_STORE, "").strip() or "directory"
    state_dir = props.get(STATE_DIR, "").strip()
    if kind == "directory":
        return DirectoryStore(Path(state_dir).absolute()) if state_dir else None
    if kind != "kubernetes":
        raise InvalidConfigError(f"{STATE_STORE} is directory or kubernetes, not {kind!r}")
    if state_dir:
        raise InvalidConfigError(f"{STATE_DIR} names a directory store, not {kind!r}")
    namespace, cluster = (props.get(key, "").strip() for key in (STATE_NAMESPACE, STATE_CLUSTER))
    if not namespace or not cluster:
        raise InvalidConfigError(
            f"{STATE_STORE}=kubernetes needs {STATE_NAMESPACE} and {STATE_CLUSTER} "
            "(where the cluster's partition-state ConfigMap and broker Leases are)"
        )
    return KubernetesStore(namespace, cluster)
