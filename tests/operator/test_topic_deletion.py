"""Deleting a TierlogTopic deletes the topic on the brokers: the operator as a process
against the real API server, real sidecars as the brokers (``Brokers`` plays the kubelet:
a stopped sidecar's Pod stays Ready, as a hung broker's would)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.operator.conftest import Brokers, RunningOperator, start_operator, wait_for
from tests.operator.test_handlers import apply, condition, events, get, ready_cluster, topic
from tests.support.kube import ControlPlane
from tierlog.client import AdminClient, Producer

pytestmark = pytest.mark.slow


def topic_ready(kube: ControlPlane, ns: str, name: str) -> None:
    wait_for(
        f"{name} Ready",
        lambda: condition(get(kube, ns, "tierlogtopic", name), "Ready")["status"] == "True",
    )


def exists(kube: ControlPlane, ns: str, kind: str, name: str) -> bool:
    return kube.kubectl("get", kind, name, "-n", ns, check=False).returncode == 0


def topics_on(brokers: Brokers, node: int) -> dict[str, int]:
    with AdminClient(brokers.sidecars[node].address) as admin:
        return admin.list_topics()


DELETION_TIMEOUT_S = 6  # --topic-deletion-timeout of the second test


def test_the_topic_goes_from_every_broker_and_the_resource_waits_for_a_silent_one(
    kube: ControlPlane,
    operator: RunningOperator,
    brokers_for: Callable[[str, str], Brokers],
) -> None:
    ns = operator.namespace
    brokers = brokers_for(ns, "demo")
    ready_cluster(kube, ns, brokers, "demo", 2)
    apply(kube, ns, topic("orders", "demo", 4))
    apply(kube, ns, topic("audit", "demo", 1))
    topic_ready(kube, ns, "orders")
    topic_ready(kube, ns, "audit")
    body = get(kube, ns, "tierlogtopic", "orders")
    assert "tierlog.io/finalizer" in body["metadata"]["finalizers"]
    brokers.project()
    with Producer({"bootstrap.servers": brokers.sidecars[0].address}) as producer:
        for partition in range(4):
            producer.send("orders", b"record", partition=partition)
    data_dirs = [brokers.workdir / f"broker-{node}" for node in range(2)]
    assert all(list(d.glob("orders-*")) for d in data_dirs)  # each broker holds partitions

    brokers.stop(1)  # its Pod stays Ready: calls to it fail
    kube.kubectl("delete", "tierlogtopic", "orders", "-n", ns, "--wait=false")
    wait_for("the topic gone from broker 0", lambda: "orders" not in topics_on(brokers, 0))
    time.sleep(5)  # two passes: the resource waits for broker 1
    waiting = get(kube, ns, "tierlogtopic", "orders")
    assert waiting["metadata"]["deletionTimestamp"]
    assert "tierlog.io/finalizer" in waiting["metadata"]["finalizers"]

    brokers.start(1)  # back with its data: the next attempt deletes the topic there too
    wait_for("the resource gone", lambda: not exists(kube, ns, "tierlogtopic", "orders"))
    for node in range(2):
        assert topics_on(brokers, node) == {"audit": 1}
    assert not any(list(d.glob("orders-*")) for d in data_dirs)
    messages = dict(events(kube, ns))
    assert messages["TopicDeleted"] == "orders deleted on brokers [0, 1]"
    wait_for(
        "the plan without the topic",
        lambda: set(get(kube, ns, "tierlogcluster", "demo")["status"]["assignment"]) == {"audit"},
    )
    # the topic is not created again, and the other one is untouched
    time.sleep(3)
    assert all("orders" not in topics_on(brokers, node) for node in range(2))
    assert condition(get(kube, ns, "tierlogtopic", "audit"), "Ready")["status"] == "True"


def test_a_silent_broker_is_given_up_on_and_a_gone_cluster_skipped(
    kube: ControlPlane, brokers_for: Callable[[str, str], Brokers], tmp_path: Path
) -> None:
    ns = kube.create_namespace("deltopic")
    running = start_operator(
        kube,
        ns,
        tmp_path / "operator.log",
        "--standalone",
        f"--topic-deletion-timeout={DELETION_TIMEOUT_S}",
    )
    try:
        brokers = brokers_for(ns, "demo")
        ready_cluster(kube, ns, brokers, "demo", 1)
        for name in ("orders", "audit"):
            apply(kube, ns, topic(name, "demo", 1))
            topic_ready(kube, ns, name)
        brokers.stop(0)
        started = time.monotonic()
        kube.kubectl("delete", "tierlogtopic", "orders", "-n", ns, "--timeout=60s")
        # It tried for the timeout first, counted from the deletionTimestamp (whole seconds).
        assert time.monotonic() - started >= DELETION_TIMEOUT_S - 1
        abandoned = dict(events(kube, ns))["TopicDeletionAbandoned"]
        assert "orders may remain on brokers [0]" in abandoned

        kube.kubectl("delete", "tierlogcluster", "demo", "-n", ns, "--timeout=60s")
        kube.kubectl("delete", "tierlogtopic", "audit", "-n", ns, "--timeout=30s")
        assert "cluster demo is gone" in dict(events(kube, ns))["TopicDeletionSkipped"]
    finally:
        running.stop()
