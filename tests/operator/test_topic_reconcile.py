"""What a cluster's TierlogTopics cost the operator: each topic is synced on its brokers,
and then neither a broker pod's event nor a change of the cluster asks the brokers about
it again (counted as the calls the brokers' ``PodPort``s forward). With a thousand
topics, one event had cost a thousand passes of a read on every broker each
(docs/BENCHMARKS.md, issue 32)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest

from tests.operator.conftest import Brokers, RunningOperator, wait_for
from tests.operator.test_handlers import apply, cluster, get, nudge, topic
from tests.support.kube import ControlPlane

pytestmark = pytest.mark.slow

TOPICS = 8
# What a topic's pass asks a broker (the cluster's passes push plans: UpdateAssignment).
_TOPIC_READS = ("/tierlog.v1.AdminService/DescribeConfigs", "/tierlog.v1.AdminService/ListTopics")


def reasons(kube: ControlPlane, ns: str) -> Counter[str]:
    """The topics' Ready reasons (``Synced`` once on every broker)."""
    return Counter(
        condition["reason"]
        for body in get(kube, ns, "tierlogtopics")["items"]
        for condition in body.get("status", {}).get("conditions", [])
        if condition["type"] == "Ready"
    )


def topic_reads(brokers: Brokers) -> int:
    calls = brokers.admin_calls()
    return sum(calls[method] for method in _TOPIC_READS)


def settled(operator: RunningOperator) -> tuple[int, int]:
    """The topic passes started, once every one started has finished."""

    def finished() -> tuple[int, int] | None:
        now = operator.passes("TierlogTopic")
        return now if now[0] == now[1] else None

    passes: tuple[int, int] = wait_for("the topic passes to finish", finished)
    return passes


def synced_topics(kube: ControlPlane, ns: str, brokers: Brokers) -> None:
    """``TOPICS`` topics applied before their broker runs: they wait for it, and its pod's
    events wake them."""
    apply(kube, ns, cluster("demo", brokers=1))
    wait_for("the StatefulSet", lambda: get(kube, ns, "statefulset", "demo"))
    for index in range(TOPICS):
        apply(kube, ns, topic(f"t{index}", "demo", 1))
    wait_for("every topic waiting", lambda: reasons(kube, ns)["BrokersNotReady"] == TOPICS)
    brokers.start(0)
    wait_for("every topic synced", lambda: reasons(kube, ns)["Synced"] == TOPICS)


def test_a_broker_pod_event_passes_no_synced_topic(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[[str, str], Brokers]
) -> None:
    ns = operator.namespace
    brokers = brokers_for(ns, "demo")
    synced_topics(kube, ns, brokers)
    passes, reads = settled(operator)[0], topic_reads(brokers)
    with operator.next_pass():  # the cluster's pass, which the same pod event wakes
        kube.kubectl(
            "annotate", "pod", "demo-0", "-n", ns, "--overwrite",
            f"test.tierlog.io/event={time.monotonic_ns()}",
        )  # fmt: skip
    assert settled(operator)[0] == passes
    assert topic_reads(brokers) == reads


def test_a_cluster_change_asks_the_brokers_nothing_about_synced_topics(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[[str, str], Brokers]
) -> None:
    ns = operator.namespace
    brokers = brokers_for(ns, "demo")
    synced_topics(kube, ns, brokers)
    passes, reads = settled(operator)[0], topic_reads(brokers)
    nudge(kube, ns, "demo")  # wakes the cluster and every topic of it
    wait_for("a pass of every topic", lambda: operator.passes("TierlogTopic")[0] >= passes + TOPICS)
    settled(operator)
    assert topic_reads(brokers) == reads
    assert reasons(kube, ns)["Synced"] == TOPICS
