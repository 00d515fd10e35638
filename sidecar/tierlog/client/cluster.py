"""What a client knows of the cluster: channels to its sidecars and who owns each partition.

Kafka's ``Metadata``: the owners of a topic's partitions come from a ``Metadata`` call
to any broker (the bootstrap servers first, then any broker learned, a silent one last:
``any_broker``), are kept for
``metadata.max.age.ms``, and are forgotten early when a broker answers
``NOT_LEADER_OR_FOLLOWER`` (its answer names the owner, which is believed at once) or
``UNKNOWN_TOPIC_OR_PARTITION``.  A partition without an owner (leader -1 while it moves
between brokers) is ``LEADER_NOT_AVAILABLE``, retriable, and asked about again.  Each
leader comes with its leader epoch, which produce and fetch requests carry (KIP-320):
an answer naming an older epoch than the one known comes from a broker that has not
caught up, and is not believed for that partition (Kafka's client does the same).  One
channel per broker address, shared by every call; gRPC reconnects a channel by itself.
Every channel is opened with the client's ``ChannelSecurity`` (plaintext, TLS or mutual
TLS, and the bearer token).  Thread-safe: producers' senders, user threads and consumers
share it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from types import TracebackType
from typing import NamedTuple, Self, TypeVar

import grpc

from tierlog.api.errors import LeaderNotAvailableError, NotLeaderOrFollowerError
from tierlog.api.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    log_service_pb2,
    log_service_pb2_grpc,
)
from tierlog.client.config import ConsumerConfig, ProducerConfig
from tierlog.client.errors import NetworkError, RequestTimedOutError, TierlogError, is_retriable
from tierlog.client.rpc import error_from_proto, error_from_rpc, open_aio_channel, open_channel
from tierlog.client.security import PLAINTEXT, ChannelSecurity
from tierlog.storage.errors import UnknownTopicOrPartitionError
from tierlog.storage.records import NO_PARTITION_LEADER_EPOCH
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "NO_ANSWER",
    "Cluster",
    "ClusterClient",
    "LeaderAndEpoch",
    "OffsetAndTimestamp",
    "TopicOwners",
]

_T = TypeVar("_T")
# What a broker that did not answer raises: the next broker is asked, cached metadata kept.
NO_ANSWER = (NetworkError, RequestTimedOutError)


class LeaderAndEpoch(NamedTuple):
    """A partition's leader and its leader epoch (NO_PARTITION_LEADER_EPOCH: not known)."""

    address: str
    epoch: int


@dataclass(frozen=True)
class TopicOwners:
    """One topic's partitions and the address of each one's owner, in its leader epoch."""

    name: str
    leaders: tuple[str, ...]  # index: partition
    fetched_monotonic: float
    leader_epochs: tuple[int, ...]  # index: partition; NO_PARTITION_LEADER_EPOCH: not known
    epochs_monotonic: float  # when a broker's answer told these epochs

    def leader(self, partition: int) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.leaders[partition], self.leader_epochs[partition])

    def newest(self, fresh: TopicOwners, trust_s: float) -> TopicOwners:
        """``fresh``, but where it names an older leader epoch for a partition than this
        view (a broker that has not caught up answered), this view's leader and epoch;
        for ``trust_s`` after this view's epochs were told, then the brokers are believed,
        so a topic deleted and made again (its epochs start over) is not ignored for ever
        (Kafka tells the two apart by topic id)."""
        if (
            fresh.partition_count != self.partition_count
            or fresh.epochs_monotonic - self.epochs_monotonic >= trust_s
        ):
            return fresh
        pairs = [(self.leader(p), fresh.leader(p)) for p in range(self.partition_count)]
        if not any(0 <= new.epoch < known.epoch for known, new in pairs):
            return fresh
        chosen = [known if 0 <= new.epoch < known.epoch else new for known, new in pairs]
        return TopicOwners(
            fresh.name,
            tuple(leader.address for leader in chosen),
            fresh.fetched_monotonic,
            tuple(leader.epoch for leader in chosen),
            self.epochs_monotonic,
        )

    @functools.cached_property  # the producer asks once per record
    def partition_count(self) -> int:
        return len(self.leaders)


class Cluster:
    # What the producer's aio stream channels are opened with, besides the security.
    stream_interceptors: Sequence[grpc.aio.ClientInterceptor] = ()

    def __init__(
        self,
        bootstrap_servers: Sequence[str],
        *,
        metadata_max_age_ms: int = 300_000,
        request_timeout_ms: int = 30_000,
        hedge_after_ms: int = 1000,
        security: ChannelSecurity = PLAINTEXT,
    ) -> None:
        if not bootstrap_servers:
            raise ValueError("bootstrap.servers: at least one HOST:PORT")
        self.bootstrap_servers = tuple(bootstrap_servers)
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self.request_timeout_s = request_timeout_ms / 1000
        self.hedge_after_s = hedge_after_ms / 1000  # see ``any_broker``
        self.security = security
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._log_stubs: dict[str, log_service_pb2_grpc.LogServiceStub] = {}
        self._topics: dict[str, TopicOwners] = {}
        self._brokers: tuple[str, ...] = ()
        # Brokers that did not answer (unreachable, or silent past a deadline): asked
        # last, after every other, until one answers again (see ``any_broker``).
        self._silent: set[str] = set()

    @classmethod
    def for_client(cls, config: ProducerConfig | ConsumerConfig) -> Cluster:
        """The cluster view a producer or consumer builds from its own settings."""
        return cls(
            config.bootstrap_servers,
            metadata_max_age_ms=config.metadata_max_age_ms,
            request_timeout_ms=config.request_timeout_ms,
            hedge_after_ms=config.retry_backoff_max_ms,
            security=ChannelSecurity.from_config(config),
        )

    # --- channels ---------------------------------------------------------------------

    def channel(self, address: str) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = open_channel(address, self.security)
            return channel

    def open_stream_channel(self, address: str) -> grpc.aio.Channel:
        """A new ``grpc.aio`` channel to a sidecar, bound to the caller's running loop and
        closed by the caller (the producer's streams; ``stream_interceptors`` see its calls)."""
        return open_aio_channel(address, self.security, self.stream_interceptors)

    def log_stub(self, address: str) -> log_service_pb2_grpc.LogServiceStub:
        """The sidecar's stub, made once (a stub builds a callable per method)."""
        stub = self._log_stubs.get(address)
        if stub is None:
            stub = self._log_stubs[address] = log_service_pb2_grpc.LogServiceStub(
                self.channel(address)
            )
        return stub

    def admin_stub(self, address: str) -> admin_service_pb2_grpc.AdminServiceStub:
        return admin_service_pb2_grpc.AdminServiceStub(self.channel(address))

    def any_broker(self, call: Callable[[str], _T], *, hedged: bool = True) -> _T:
        """``call(address)`` on the bootstrap servers, then the known brokers, until one
        answers; the last failure if none does.  Errors with a reason (the broker
        answered) are raised at once.

        A broker that cannot be reached, or has not answered within ``hedge_after_ms``
        (paused, cut off, overloaded), does not hold the call up: the next broker is
        asked beside it, the first answer wins, and the silent one is remembered and
        asked only after every other until it answers again, so later calls do not wait
        on it first (Kafka's client backs off a node that failed and asks the least
        loaded one).  Attempts left behind end on their own, within ``request.timeout.ms``.

        ``hedged=False`` is for a call that must not be made twice (a topic change on
        brokers that share one store: the second broker would find the topic the first
        just made and answer TOPIC_ALREADY_EXISTS): the next broker is asked only once
        the one asked could not be reached or let its request time out."""
        with self._lock:
            silent = set(self._silent)
        every = dict.fromkeys((*self.bootstrap_servers, *self._brokers))
        candidates = iter(sorted(every, key=silent.__contains__))  # stable: order kept
        attempts: dict[Future[_T], str] = {}

        def ask_next() -> bool:
            address = next(candidates, None)
            if address is not None:
                attempts[_in_a_thread(call, address)] = address
            return address is not None

        failure: TierlogError = NetworkError("no broker to ask")
        more = ask_next()
        while attempts:
            hedge_after_s = self.hedge_after_s if more and hedged else None
            done, _ = wait(attempts, hedge_after_s, FIRST_COMPLETED)
            if not done:  # still silent: ask the next one beside them
                for address in attempts.values():
                    self.note_no_answer(address)
                more = ask_next()
            for attempt in done:
                address = attempts.pop(attempt)
                try:
                    answer = attempt.result()
                except grpc.RpcError as error:
                    failure = error_from_rpc(error)
                    if not isinstance(failure, NO_ANSWER):
                        self.note_answer(address)
                        raise failure from None
                    self.note_no_answer(address)
                    more = ask_next()
                    continue
                self.note_answer(address)
                return answer
        raise failure

    def note_no_answer(self, address: str) -> None:
        """``address`` did not answer (in time): ask the other brokers first from now on."""
        with self._lock:
            self._silent.add(address)

    def note_answer(self, address: str) -> None:
        """``address`` answered: it is asked in its turn again."""
        if address in self._silent:  # the common case, without the lock: nothing to do
            with self._lock:
                self._silent.discard(address)

    def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
            self._log_stubs = {}
        for channel in channels:
            channel.close()

    # --- metadata ---------------------------------------------------------------------

    def owners(self, topic: str, *, refresh: bool = False) -> TopicOwners:
        """The topic's partitions and owners, from the cache unless stale or ``refresh``;
        ``UNKNOWN_TOPIC_OR_PARTITION`` (typed) if the topic does not exist."""
        # No lock for the read: the producer asks once per record, a dict lookup is atomic,
        # and entries are replaced whole, never changed in place.
        cached = self._topics.get(topic)
        if (
            cached is not None
            and not refresh
            and time.monotonic() - cached.fetched_monotonic < self.metadata_max_age_s
        ):
            return cached
        try:
            return self.refresh([topic])[topic]
        except NO_ANSWER:
            if cached is None:
                raise
            # No broker answers right now (one restarting, a leader gone): the partitions
            # are what they were, and a send is queued for its retries, not refused.
            return cached

    def refresh(self, topics: Sequence[str]) -> dict[str, TopicOwners]:
        """Ask a broker for the owners of ``topics`` (each must exist)."""
        request = admin_service_pb2.MetadataRequest(topics=list(topics))

        def ask(address: str) -> admin_service_pb2.MetadataResponse:
            return self.admin_stub(address).Metadata(request, timeout=self.request_timeout_s)

        response = self.any_broker(ask)
        now = time.monotonic()
        found: dict[str, TopicOwners] = {}
        for entry in response.topics:
            if entry.HasField("error"):
                if entry.error.reason == UnknownTopicOrPartitionError.reason:
                    # Gone: a topic made again under its name starts at leader epoch 0.
                    with self._lock:
                        self._topics.pop(entry.name, None)
                raise error_from_proto(entry.error)
            by_partition = sorted(entry.partitions, key=lambda p: p.partition)
            found[entry.name] = TopicOwners(
                entry.name,
                tuple(p.leader_address for p in by_partition),
                now,
                tuple(p.leader_epoch for p in by_partition),
                now,
            )
        with self._lock:
            for name, fresh in found.items():
                cached = self._topics.get(name)
                if cached is not None:
                    found[name] = cached.newest(fresh, self.metadata_max_age_s)
            self._topics.update(found)
            self._brokers = tuple(broker.address for broker in response.brokers)
        return found

    def broker_addresses(self) -> tuple[str, ...]:
        """Every broker's address, as a broker's Metadata answer lists them now."""
        self.refresh([])
        return self._brokers

    def leader(self, tp: TopicPartition) -> LeaderAndEpoch:
        owners = self.owners(tp.topic)
        if tp.partition >= owners.partition_count:
            owners = self.owners(tp.topic, refresh=True)
        if not 0 <= tp.partition < owners.partition_count:
            raise UnknownTopicOrPartitionError(
                f"{tp}: the topic has {owners.partition_count} partitions"
            )
        leader = owners.leader(tp.partition)
        if not leader.address:  # moving between brokers: ask again next time
            self.invalidate(tp.topic)
            raise LeaderNotAvailableError(f"{tp} has no owner right now (it is moving)")
        return leader

    def known_leader_address(self, tp: TopicPartition) -> str:
        """The address the cached metadata names as ``tp``'s leader, however old ("" if
        none is known); never a request."""
        cached = self._topics.get(tp.topic)
        if cached is None or not 0 <= tp.partition < cached.partition_count:
            return ""
        return cached.leaders[tp.partition]

    def invalidate(self, topic: str) -> None:
        """Mark a topic's owners stale: the next look-up asks a broker (and keeps them if
        no broker answers)."""
        with self._lock:
            cached = self._topics.get(topic)
            if cached is not None:
                self._topics[topic] = dataclasses.replace(cached, fetched_monotonic=-math.inf)

    def moved(self, tp: TopicPartition, leader_address: str) -> None:
        """A broker said ``tp`` is owned at ``leader_address``: believe it until the next
        refresh (and refresh the rest of the topic then), in an epoch not known yet."""
        with self._lock:
            cached = self._topics.get(tp.topic)
            if not leader_address or cached is None or tp.partition >= cached.partition_count:
                self._topics.pop(tp.topic, None)
                return
            leaders = list(cached.leaders)
            leaders[tp.partition] = leader_address
            epochs = list(cached.leader_epochs)
            epochs[tp.partition] = NO_PARTITION_LEADER_EPOCH
            self._topics[tp.topic] = TopicOwners(
                tp.topic, tuple(leaders), 0.0, tuple(epochs), cached.epochs_monotonic
            )

    def call_leader(
        self,
        tp: TopicPartition,
        call: Callable[[log_service_pb2_grpc.LogServiceStub], _T],
        attempts: int = 5,
    ) -> _T:
        """``call`` on ``tp``'s owner, following ``NOT_LEADER_OR_FOLLOWER`` and retrying
        retriable failures up to ``attempts`` times (for one-off calls: ListOffsets,
        DeleteRecords)."""
        for attempt in range(attempts):
            error: TierlogError
            try:
                return call(self.log_stub(self.leader(tp).address))
            except LeaderNotAvailableError as unavailable:
                error = unavailable
            except grpc.RpcError as rpc_error:
                error = error_from_rpc(rpc_error)
                if isinstance(error, NotLeaderOrFollowerError):
                    self.moved(tp, error.leader_address)
                elif is_retriable(error):
                    self.invalidate(tp.topic)
            if attempt == attempts - 1 or not is_retriable(error):
                raise error from None
            time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")


def _in_a_thread(call: Callable[[str], _T], address: str) -> Future[_T]:
    """``call(address)`` in a daemon thread of its own: one left waiting on a silent
    broker (until its deadline) neither holds up the caller nor the process's exit."""
    outcome: Future[_T] = Future()

    def attempt() -> None:
        try:
            outcome.set_result(call(address))
        except BaseException as error:  # handed to the caller, who raises it
            outcome.set_exception(error)

    threading.Thread(target=attempt, name=f"tierlog-ask-{address}", daemon=True).start()
    return outcome


@dataclass(frozen=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int


class ClusterClient:
    """What the consumer and the admin client share: a cluster view they may own, closed
    with them (``with`` blocks included), and offset look-ups; a view passed in stays
    open for its owner."""

    cluster: Cluster
    _own_cluster: bool
    _timeout_s: float

    def list_offset(
        self,
        tp: TopicPartition,
        timestamp: int,
        attempts: int = 5,
        *,
        isolation_level: log_service_pb2.IsolationLevel.ValueType = (
            log_service_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED
        ),
    ) -> OffsetAndTimestamp:
        """Kafka's ListOffsets from ``tp``'s leader: -2 earliest, -1 latest (the last
        stable offset under read_committed), -3 the largest timestamp, -4 earliest local,
        -5 latest tiered, else the first offset whose timestamp is at or after
        ``timestamp`` (offset -1: none)."""
        request = log_service_pb2.ListOffsetsRequest(
            topic=tp.topic,
            partition=tp.partition,
            timestamp_ms=timestamp,
            isolation_level=isolation_level,
        )
        response = self.cluster.call_leader(
            tp, lambda stub: stub.ListOffsets(request, timeout=self._timeout_s), attempts
        )
        return OffsetAndTimestamp(response.offset, response.timestamp_ms)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._own_cluster:
            self.cluster.close()
