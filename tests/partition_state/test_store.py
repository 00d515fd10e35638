"""The partition-state store's contract, kept by both stores (the ``store_at`` fixture
runs each test on a directory and on the real API server)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import replace

import pytest
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap, Secret

from tests.partition_state.conftest import Clock
from tierlog.api.errors import (
    IneligibleReplicaError,
    InvalidPartitionsError,
    InvalidUpdateVersionError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
)
from tierlog.broker.scram_credentials import (
    CredentialChange,
    ScramCredential,
    ScramCredentials,
    ScramMechanism,
    UserCredentials,
)
from tierlog.partition_state.kube_store import CLUSTER_LABEL
from tierlog.partition_state.model import (
    LEGACY_TOPIC_ID,
    NO_LEADER,
    PartitionState,
    StatePart,
    TopicLayout,
    part_to_json,
)
from tierlog.partition_state.store import PartitionStateStore
from tierlog.storage.errors import UnknownTopicOrPartitionError

OpenStore = Callable[..., tuple[PartitionStateStore, str, str]]
ORDERS = {0: PartitionState.new((1, 2, 3)), 1: PartitionState.new((2, 3, 1))}


def test_a_created_topic_reads_back_from_another_store_object(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    store.create_topic("orders", ORDERS)
    store.create_topic("audit.log_v2", {0: PartitionState.new((3,))})

    again, _, _ = store_at()
    assert again.read_topic("orders") == ORDERS
    assert again.list_topics() == ["audit.log_v2", "orders"]


def test_a_topics_configs_read_back_and_go_with_it(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    store.write_topic_configs("orders", {"min.insync.replicas": "2", "segment.bytes": "2000"})
    store.create_topic("orders", ORDERS)
    again, _, _ = store_at()
    assert again.read_topic_configs("orders") == {
        "min.insync.replicas": "2",
        "segment.bytes": "2000",
    }
    again.write_topic_configs("orders", {"min.insync.replicas": "3"})
    assert store.read_topic_configs("orders") == {"min.insync.replicas": "3"}
    assert store.list_topics() == ["orders"]  # configs are not a topic of their own
    store.delete_topic("orders")
    assert again.read_topic_configs("orders") == {}


def test_partitions_are_added_after_the_last(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    store.create_topic("orders", ORDERS)
    store.add_partitions("orders", {2: PartitionState.new((3, 1, 2))})
    assert store.read_topic("orders")[2] == PartitionState.new((3, 1, 2))
    with pytest.raises(InvalidPartitionsError):
        store.add_partitions("orders", {4: PartitionState.new((1,))})


def test_a_taken_topic_name_is_refused_and_keeps_its_state(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    store.create_topic("orders", ORDERS)
    with pytest.raises(TopicAlreadyExistsError):
        store.create_topic("orders", {0: PartitionState.new((9,))})
    assert store.read_topic("orders") == ORDERS


def test_a_deleted_topic_is_unknown(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    store.create_topic("orders", ORDERS)
    store.delete_topic("orders")
    assert store.list_topics() == []
    with pytest.raises(UnknownTopicOrPartitionError):
        store.read_topic("orders")
    with pytest.raises(UnknownTopicOrPartitionError):
        store.delete_topic("orders")


def test_a_change_at_the_current_partition_epoch_lands_and_bumps_it(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    store.create_topic("orders", ORDERS)

    shrunk = store.alter_partition("orders", 0, 0, ORDERS[0].with_isr((1, 2)))
    elected = store.alter_partition("orders", 0, 1, shrunk.with_leader(2, isr=(2,)))

    assert (shrunk.partition_epoch, shrunk.leader_epoch, shrunk.isr) == (1, 0, (1, 2))
    assert (elected.partition_epoch, elected.leader_epoch, elected.leader) == (2, 1, 2)
    assert store.read_topic("orders") == {0: elected, 1: ORDERS[1]}


def test_a_reassignment_under_way_reads_back_with_its_adding_and_removing_replicas(
    store_at: OpenStore,
) -> None:
    store, _, _ = store_at()
    store.create_topic("orders", ORDERS)
    moving = replace(ORDERS[0], replicas=(2, 3, 4, 1), adding_replicas=(4,), removing_replicas=(1,))
    stored = store.alter_partition("orders", 0, 0, moving)

    again, _, _ = store_at()
    assert again.read_topic("orders")[0] == stored
    assert (stored.adding_replicas, stored.removing_replicas) == ((4,), (1,))


def test_a_change_made_against_a_stale_epoch_loses_and_changes_nothing(
    store_at: OpenStore,
) -> None:
    """Two deciders read epoch 0; the first change lands, the second is refused with the
    epoch it must re-read at: the losing path is a normal one."""
    first, _, _ = store_at()
    second, _, _ = store_at()
    first.create_topic("orders", ORDERS)
    seen_by_both = second.read_topic("orders")[0]

    landed = first.alter_partition("orders", 0, 0, seen_by_both.with_isr((1, 3)))
    with pytest.raises(InvalidUpdateVersionError) as refused:
        second.alter_partition("orders", 0, 0, seen_by_both.with_leader(NO_LEADER, isr=()))

    assert refused.value.current_epoch == 1
    assert second.read_topic("orders")[0] == landed


def test_a_change_of_an_unknown_partition_is_refused(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    with pytest.raises(UnknownTopicOrPartitionError):
        store.alter_partition("orders", 0, 0, ORDERS[0])
    store.create_topic("orders", ORDERS)
    with pytest.raises(UnknownTopicOrPartitionError):
        store.alter_partition("orders", 7, 0, ORDERS[0])


def _alter_isr(
    store: PartitionStateStore, state: PartitionState, isr: tuple[int, ...]
) -> PartitionState:
    """A leader's ISR change of orders-0 alone; its stored state."""
    return store.alter_isrs("orders", {0: (state, isr)}).stored[0]


def test_a_leaders_isr_change_adds_no_broker_whose_lease_is_gone_or_expired(
    store_at: OpenStore,
) -> None:
    """Kafka's INELIGIBLE_REPLICA (KIP-841): the controller fenced the broker, and a
    leader that still counts it caught up cannot put it back; it may still shrink."""
    clock = Clock()
    store, _, _ = store_at(clock)
    store.create_topic("orders", ORDERS)
    for broker in (1, 2):
        store.acquire_lease(broker, f"broker-{broker}", 10.0)
    shrunk = _alter_isr(store, ORDERS[0], (1, 2))  # broker 3 holds no lease

    with pytest.raises(
        IneligibleReplicaError, match="broker 3 cannot join the ISR: it holds no lease"
    ):
        _alter_isr(store, shrunk, (1, 2, 3))
    clock.now += 11
    store.renew_lease(1, "broker-1")
    shrunk = _alter_isr(store, shrunk, (1,))
    with pytest.raises(
        IneligibleReplicaError, match="broker 2 cannot join the ISR: its lease expired"
    ):
        _alter_isr(store, shrunk, (1, 2))
    assert store.read_topic("orders")[0] == shrunk

    store.acquire_lease(2, "broker-2-again", 10.0)
    assert _alter_isr(store, shrunk, (1, 2)).isr == (1, 2)


def test_a_broker_in_controlled_shutdown_joins_no_isr_until_a_new_incarnation_holds_its_lease(
    store_at: OpenStore,
) -> None:
    """KIP-841: the controller refuses an AlterPartition that adds a broker in controlled
    shutdown, though its lease is current and it still fetches. Renewals keep the mark;
    only the next incarnation's lease is clear of it, and no other holder may set it."""
    store, _, _ = store_at()
    store.create_topic("orders", ORDERS)
    for broker in (1, 2, 3):
        store.acquire_lease(broker, f"broker-{broker}", 10.0)
    shrunk = _alter_isr(store, ORDERS[0], (1, 2))

    with pytest.raises(StaleBrokerEpochError):
        store.enter_controlled_shutdown(3, "broker-3-old")
    marked = store.enter_controlled_shutdown(3, "broker-3")
    renewed = store.renew_lease(3, "broker-3")

    assert marked.in_controlled_shutdown and renewed.in_controlled_shutdown
    again, _, _ = store_at()
    assert again.read_leases()[3] == renewed
    assert not store.read_leases()[2].in_controlled_shutdown
    with pytest.raises(
        IneligibleReplicaError, match="broker 3 cannot join the ISR: it is in controlled shutdown"
    ):
        _alter_isr(store, shrunk, (1, 2, 3))
    assert _alter_isr(store, shrunk, (1,)).isr == (1,)  # shrinking is still allowed
    restarted = store.acquire_lease(3, "broker-3-again", 10.0)
    assert not restarted.in_controlled_shutdown
    assert _alter_isr(store, store.read_topic("orders")[0], (1, 3)).isr == (1, 3)


def test_a_lease_says_its_incarnations_logs_were_lost_until_the_holder_clears_it(
    store_at: OpenStore,
) -> None:
    """A broker's first incarnation lost nothing, whatever it says; a later one started
    on a formatted log dir is marked through its renewals, until it clears the mark (no
    other holder may); the next incarnation says again."""
    store, _, _ = store_at()
    assert not store.acquire_lease(1, "broker-1-a", 10.0, logs_lost=True).logs_lost
    assert not store.acquire_lease(1, "broker-1-b", 10.0).logs_lost  # kill -9, restarted
    wiped = store.acquire_lease(1, "broker-1-c", 10.0, logs_lost=True)
    renewed = store.renew_lease(1, "broker-1-c")
    assert wiped.logs_lost and renewed.logs_lost
    again, _, _ = store_at()
    assert again.read_leases()[1] == renewed
    with pytest.raises(StaleBrokerEpochError):
        store.logs_recovered(1, "broker-1-b")
    assert not store.logs_recovered(1, "broker-1-c").logs_lost
    assert not store.renew_lease(1, "broker-1-c").logs_lost
    assert store.acquire_lease(1, "broker-1-d", 10.0, logs_lost=True).logs_lost


def test_a_broker_lease_is_renewed_by_its_holder_and_taken_over_by_a_new_incarnation(
    store_at: OpenStore,
) -> None:
    clock = Clock()
    store, _, _ = store_at(clock)

    first = store.acquire_lease(1, "broker-1-a", 10)
    clock.now += 4
    renewed = store.renew_lease(1, "broker-1-a")
    clock.now += 4
    restarted = store.acquire_lease(1, "broker-1-b", 10)

    assert first.broker_epoch == renewed.broker_epoch == 1
    assert renewed.renewed_at - first.renewed_at == pytest.approx(4, abs=1e-5)
    assert (restarted.holder, restarted.broker_epoch) == ("broker-1-b", 2)
    with pytest.raises(StaleBrokerEpochError):
        store.renew_lease(1, "broker-1-a")  # the old incarnation woke up: fenced
    store.acquire_lease(2, "broker-2-a", 10)
    assert store.read_leases() == {1: restarted, 2: store.read_leases()[2]}
    assert store.read_leases()[1].duration_s == 10


def test_a_lease_given_up_counts_no_more_and_only_the_next_incarnation_takes_it_again(
    store_at: OpenStore,
) -> None:
    """The end of a clean stop (Kafka fences a broker whose controlled shutdown
    completed): the lease, still within its duration, no longer counts, for any reader;
    its holder can neither renew it nor give it up twice, no other holder can give it
    up, and the broker's next incarnation takes it in the next broker epoch, current
    again and clear of every mark."""
    clock = Clock()
    store, _, _ = store_at(clock)
    store.create_topic("orders", ORDERS)
    store.acquire_lease(3, "broker-3-a", 30.0)
    store.enter_controlled_shutdown(3, "broker-3-a")
    with pytest.raises(StaleBrokerEpochError):
        store.release_lease(3, "broker-3-old")
    clock.now += 1

    released = store.release_lease(3, "broker-3-a")

    assert released.released and released.in_controlled_shutdown
    assert (released.holder, released.broker_epoch) == ("broker-3-a", 1)
    assert released.renewed_at == pytest.approx(clock.now, abs=1e-5)
    again, _, _ = store_at(clock)
    assert again.read_leases()[3] == released
    assert not released.current_at(clock.now)  # 29 s of its duration left
    for refused in (store.renew_lease, store.release_lease, store.enter_controlled_shutdown):
        with pytest.raises(StaleBrokerEpochError, match="given up"):
            refused(3, "broker-3-a")
    shrunk = _alter_isr(store, ORDERS[0], (1, 2))
    with pytest.raises(
        IneligibleReplicaError,
        match="broker 3 cannot join the ISR: it stopped and gave its lease up",
    ):
        _alter_isr(store, shrunk, (1, 2, 3))

    restarted = store.acquire_lease(3, "broker-3-b", 30.0)

    assert (restarted.holder, restarted.broker_epoch) == ("broker-3-b", 2)
    assert not (restarted.released or restarted.in_controlled_shutdown)
    assert restarted.current_at(clock.now)
    assert _alter_isr(store, shrunk, (1, 2, 3)).isr == (1, 2, 3)


def test_a_lease_nobody_acquired_cannot_be_renewed(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    with pytest.raises(StaleBrokerEpochError):
        store.renew_lease(5, "broker-5-a")
    assert store.read_leases() == {}


# More partitions than the one ConfigMap of before parts held (1 MiB: some 10,000), and
# not a whole number of parts, so adding partitions fills the last part and makes one.
BIG = 11_500
ROTATIONS = ((1, 2, 3), (2, 3, 1), (3, 1, 2))


def _big_topic(count: int, first_replica: int = 0) -> dict[int, PartitionState]:
    return {p: PartitionState.new(ROTATIONS[(p + first_replica) % 3]) for p in range(count)}


def test_a_topic_larger_than_one_object_could_hold_is_created_changed_and_deleted(
    store_at: OpenStore,
) -> None:
    store, _, _ = store_at()
    partitions = _big_topic(BIG)
    whole = TopicLayout(LEGACY_TOPIC_ID, BIG, BIG)
    assert len(part_to_json(StatePart(LEGACY_TOPIC_ID, 0, partitions, whole))) > 2**20
    store.create_topic("clicks", partitions)
    again, _, _ = store_at()
    assert again.read_topic("clicks") == partitions

    store.add_partitions("clicks", {p: PartitionState.new((2, 1)) for p in range(BIG, 12_500)})
    grown = again.read_topic("clicks")
    assert len(grown) == 12_500 and grown[12_499] == PartitionState.new((2, 1))

    shrunk = store.alter_partition("clicks", 12_001, 0, grown[12_001].with_isr((2,)))
    assert again.read_topic("clicks")[12_001] == shrunk

    store.delete_topic("clicks")
    assert again.list_topics() == []
    with pytest.raises(UnknownTopicOrPartitionError):
        again.read_topic("clicks")
    store.create_topic("clicks", _big_topic(BIG, first_replica=1))  # none of its parts
    assert again.read_topic("clicks") == _big_topic(BIG, first_replica=1)


def test_a_batch_costs_one_write_per_part_it_touches_and_each_change_stands_alone(
    store_at: OpenStore,
) -> None:
    """Changes in parts 0, 5 and 11, the last one decided on a stale epoch: the first two
    land in one write each, the third is refused with the epoch it must re-read at, and
    its part is not written at all."""
    store, _, _ = store_at()
    partitions = _big_topic(BIG)
    store.create_topic("clicks", partitions)
    stale = store.alter_partition("clicks", 11_400, 0, partitions[11_400].with_isr((3, 1)))
    writes = store.part_writes

    altered = store.alter_partitions(
        "clicks",
        {
            0: (0, partitions[0].with_leader(2, isr=(2, 3))),
            1: (0, partitions[1].with_leader(3, isr=(3, 1))),
            5_500: (0, partitions[5_500].with_isr((2, 3))),
            11_400: (0, partitions[11_400].with_leader(NO_LEADER, isr=())),
        },
    )

    assert store.part_writes - writes == 2
    assert altered.lost == {11_400: 1}
    assert sorted(altered.stored) == [0, 1, 5_500]
    assert all(state.partition_epoch == 1 for state in altered.stored.values())
    again, _, _ = store_at()
    read = again.read_topic("clicks")
    assert {p: read[p] for p in altered.stored} == altered.stored
    assert read[11_400] == stale


def test_leaders_isr_changes_go_in_one_write_per_part_and_an_ineligible_one_stops_the_batch(
    store_at: OpenStore,
) -> None:
    """Broker 3 leaves the ISRs of parts 0 and 2 in one write each; while it holds no
    lease, the batch that adds it back is refused whole (INELIGIBLE_REPLICA) with
    nothing written; once it holds one, the batch lands in one write per part again."""
    store, _, _ = store_at()
    partitions = _big_topic(2_500)
    store.create_topic("clicks", partitions)
    for broker in (1, 2):
        store.acquire_lease(broker, f"broker-{broker}", 10.0)
    touched = [p for p in (*range(0, 1000), *range(2000, 2500)) if partitions[p].leader != 3]
    without_3 = {p: tuple(r for r in partitions[p].isr if r != 3) for p in touched}
    writes = store.part_writes

    shrunk = store.alter_isrs("clicks", {p: (partitions[p], without_3[p]) for p in touched})

    assert store.part_writes - writes == 2
    assert not shrunk.lost
    assert {p: s.isr for p, s in shrunk.stored.items()} == without_3
    back = {p: (shrunk.stored[p], partitions[p].isr) for p in touched}
    with pytest.raises(IneligibleReplicaError, match="broker 3 cannot join the ISR"):
        store.alter_isrs("clicks", back)
    assert store.part_writes - writes == 2
    store.acquire_lease(3, "broker-3", 10.0)
    assert not store.alter_isrs("clicks", back).lost
    assert store.part_writes - writes == 4
    assert store.read_topic("clicks")[touched[-1]].isr == partitions[touched[-1]].isr


def test_a_batch_with_a_partition_the_topic_lacks_is_refused(store_at: OpenStore) -> None:
    store, _, _ = store_at()
    store.create_topic("orders", ORDERS)
    with pytest.raises(UnknownTopicOrPartitionError):
        store.alter_partitions("orders", {0: (0, ORDERS[0].with_isr((1,))), 2: (0, ORDERS[0])})
    assert store.read_topic("orders") == ORDERS
    with pytest.raises(UnknownTopicOrPartitionError):
        store.alter_partitions("audit", {0: (0, ORDERS[0])})


def test_topics_whose_names_differ_only_in_case_or_in_dots_are_kept_apart(
    store_at: OpenStore,
) -> None:
    """Kafka's names allow capitals, ``.`` and ``_``, a ConfigMap's do not: the stored
    names keep what the names alone would mix up (``.`` against ``_`` is refused a level
    up, by the broker's topic changes, not by the store)."""
    store, _, _ = store_at()
    names = ("Orders", "orders", "orders.eu", "orders_eu")
    for number, name in enumerate(names):
        store.create_topic(name, {0: PartitionState.new((number,))})
    again, _, _ = store_at()
    assert again.list_topics() == sorted(names)
    assert [again.read_topic(name)[0].replicas for name in names] == [(0,), (1,), (2,), (3,)]


def _upsert(user: str) -> CredentialChange:
    salted = hashlib.pbkdf2_hmac("sha256", b"secret", b"salt", 4096)
    return CredentialChange(user, ScramMechanism.SCRAM_SHA_256.value, 4096, b"salt", salted)


def test_scram_credentials_read_back_from_another_store_object_and_a_rival_loses_nothing(
    store_at: OpenStore,
) -> None:
    """Every broker's store object reads the same users. A change decided on a read that
    a rival's write then overtook is decided again on Kubernetes (its write is a 409
    Conflict); on one machine the file lock keeps the rival out until the change is done,
    so the rival goes after it (a rival inside the lock would wait on itself)."""
    store, kind, where = store_at()
    rival, _, _ = store_at()
    credentials = ScramCredentials(store.scram_credentials())
    credentials.apply([_upsert("alice")])
    decided = 0

    def add_carol(users: UserCredentials) -> UserCredentials:
        nonlocal decided
        decided += 1
        if kind == "kube" and decided == 1:
            ScramCredentials(rival.scram_credentials()).apply([_upsert("bob")])
        return {**users, "carol": users["alice"]}

    credentials.alter(add_carol)
    if kind != "kube":
        ScramCredentials(rival.scram_credentials()).apply([_upsert("bob")])
    again, _, _ = store_at()
    users = ScramCredentials(again.scram_credentials()).read()
    assert sorted(users) == ["alice", "bob", "carol"]
    assert decided == (2 if kind == "kube" else 1)
    sha_256 = ScramMechanism.SCRAM_SHA_256
    assert users["alice"][sha_256] == ScramCredential.from_password(
        sha_256, "secret", 4096, b"salt"
    )
    if kind == "kube":
        _assert_kept_in_a_secret_only(where, again.scram_credentials().read())


def _assert_kept_in_a_secret_only(where: str, document: str | None) -> None:
    """Derived keys are credential material: on Kubernetes they are an Opaque Secret
    labelled with the cluster (readers of the namespace's ConfigMaps must not see them),
    its ``document`` base64 as a Secret's data is, and no ConfigMap of that name."""
    kubeconfig, namespace, cluster = where.split()
    client = Client(KubeConfig.from_file(kubeconfig))
    name = f"{cluster}-scram-credentials"
    secret = client.get(Secret, name, namespace=namespace)
    assert secret.type == "Opaque"
    assert secret.metadata is not None and secret.metadata.labels == {CLUSTER_LABEL: cluster}
    assert document is not None
    assert base64.b64decode((secret.data or {})["document"]).decode() == document
    with pytest.raises(ApiError) as absent:
        client.get(ConfigMap, name, namespace=namespace)
    assert absent.value.status.code == 404
