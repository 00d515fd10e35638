"""The Kubernetes store's watch of its ConfigMaps (``kube_watch``), against the real API
server: a watch the server refuses or ends leaves the store's readers reading
everything, and the store's own calls (the broker's lease) untouched; ``close`` ends it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lightkube import Client, KubeConfig

from tests.support.kube import ControlPlane, start_control_plane
from tierlog.partition_state.change_journal import ChangeJournal
from tierlog.partition_state.kube_store import CLUSTER_LABEL, PARTITION_STATE_LABEL, KubeStateStore
from tierlog.partition_state.kube_watch import StateWatch
from tierlog.partition_state.model import PartitionState
from tierlog.partition_state.store_follower import StoreFollower

pytestmark = pytest.mark.go_tools

WAIT_S = 180.0  # a hundred refused watches on a busy 2-core machine: a minute or more
# A lightkube client's connection pool (httpx's default): a refused watch that kept its
# connection would, this many times over, leave the store's own calls none.
POOL_CONNECTIONS = 100


def _wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _client(plane: ControlPlane) -> Client:
    return Client(KubeConfig.from_file(plane.kubeconfig), field_manager="tierlog-tests")


def _account_without_watch(plane: ControlPlane, namespace: str, workdir: Path) -> Client:
    """A client as a broker whose Role grants its ConfigMaps and Leases but not ``watch``
    (the operator's Role before it did)."""
    ns = ("-n", namespace)
    plane.kubectl("create", "serviceaccount", "broker", *ns)
    verbs = "--verb=get,list,create,update,delete"
    plane.kubectl("create", "role", "no-watch", verbs, "--resource=configmaps,leases", *ns)
    account = f"--serviceaccount={namespace}:broker"
    plane.kubectl("create", "rolebinding", "no-watch", "--role=no-watch", account, *ns)
    path = plane.kubeconfig_as("broker", namespace, workdir)
    return Client(KubeConfig.from_file(path), field_manager="tierlog-tests")


def test_a_refused_watch_leaves_the_store_followed_by_polling_and_the_lease_renewed(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    namespace = control_plane.create_namespace("refused")
    client = _account_without_watch(control_plane, namespace, tmp_path)
    store = KubeStateStore(client, namespace, "demo", watch_retry_s=0.001)
    writer = KubeStateStore(_client(control_plane), namespace, "demo")
    store.acquire_lease(1, "incarnation-a", 9.0)
    follower = StoreFollower(store)
    assert follower.refresh().changed is None  # a first read: everything
    try:
        _wait_until(lambda: store.watch_failures >= POOL_CONNECTIONS, "the watch was never refused")

        renewed = store.renew_lease(1, "incarnation-a")
        writer.create_topic("orders", {0: PartitionState.new((1, 2))})
        view = follower.refresh()
    finally:
        store.close()
    assert renewed.holder == "incarnation-a"
    assert "orders" in view.topics
    assert view.changed is None  # no journal without the watch: everything read, polling


def _watch(plane: ControlPlane, namespace: str, journal: ChangeJournal) -> StateWatch:
    return StateWatch(
        lambda: _client(plane),
        namespace,
        {CLUSTER_LABEL: "demo"},
        ("head", "part", "configs"),
        PARTITION_STATE_LABEL,
        "topic",
        journal,
        retry_s=0.01,
    )


def _tracking(journal: ChangeJournal) -> bool:
    """Whether the journal follows changes (a reader up to date is told of none)."""
    return journal.since(journal.since(None).cursor).topics is not None


@pytest.fixture(scope="module")
def uncached_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """An API server serving watches from etcd, so a compaction expires old versions
    at once (the session's server keeps a watch cache, which would serve them)."""
    plane = start_control_plane(tmp_path_factory.mktemp("uncached"), watch_cache=False)
    yield plane
    plane.stop()


def test_a_watch_from_an_expired_version_lists_again_and_misses_no_change(
    uncached_plane: ControlPlane,
) -> None:
    """410 Gone: the version the watch resumes from is older than the server keeps.
    The journal loses track, so a reader from before reads everything (the change made
    meanwhile included); a new list and watch start it afresh, and the changes after
    that are journaled again."""
    namespace = uncached_plane.create_namespace("expired")
    writer = KubeStateStore(_client(uncached_plane), namespace, "demo")
    journal = ChangeJournal()
    watch = _watch(uncached_plane, namespace, journal)
    writer.create_topic("orders", {0: PartitionState.new((1, 2))})
    uncached_plane.compact_etcd()
    watch.start(from_version="1")  # before "orders", and compacted away
    before = journal.since(None).cursor
    try:
        _wait_until(lambda: watch.failures == 1, "the watch never ended")
        _wait_until(lambda: _tracking(journal), "the watch never listed again")
        assert journal.since(before).topics is None  # so "orders" is read

        cursor = journal.since(None).cursor
        writer.write_topic_configs("orders", {"retention.ms": "1000"})
        changed = frozenset({"orders"})
        _wait_until(lambda: journal.since(cursor).topics == changed, "a change missed")
    finally:
        watch.close()
    assert watch.failures == 1


def test_close_ends_the_watch_at_once(control_plane: ControlPlane) -> None:
    """A broker that stops ends its watch: the thread does not wait out the watch
    request it is in (``kube_watch.WATCH_S``)."""
    namespace = control_plane.create_namespace("closed")
    journal = ChangeJournal()
    watch = _watch(control_plane, namespace, journal)
    watch.start()
    cursor = journal.since(None).cursor
    writer = KubeStateStore(_client(control_plane), namespace, "demo")
    writer.create_topic("orders", {0: PartitionState.new((1, 2))})
    read = frozenset({"orders"})
    _wait_until(lambda: journal.since(cursor).topics == read, "the watch is not reading")

    watch.close(timeout_s=5.0)

    assert not watch.running
