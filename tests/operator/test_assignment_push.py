"""The operator pushes each new partition plan to the running brokers as soon as it writes
it into the ConfigMap: the operator as a process against the real API server, real
sidecars as the brokers. ``Brokers`` plays the kubelet only when asked (``project()``),
so here a broker that learns the plan without it learned it from the push."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.operator.conftest import Brokers, RunningOperator, wait_for
from tests.operator.test_handlers import ready_cluster
from tests.support.kube import ControlPlane
from tierlog.client import AdminClient

pytestmark = pytest.mark.slow


def brokers_known_to(brokers: Brokers, node: int) -> dict[int, str]:
    with AdminClient(brokers.sidecars[node].address) as admin:
        return dict(admin.metadata().brokers)


def test_a_scale_up_reaches_running_brokers_at_once_and_a_missed_push_on_the_next_pass(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[[str, str], Brokers]
) -> None:
    ns = operator.namespace
    brokers = brokers_for(ns, "demo")
    ready_cluster(kube, ns, brokers, "demo", 2)
    projected = brokers.assignment_file.read_text()  # what the pods' volume holds
    brokers.stop(1)  # its Pod stays Ready, as a hung broker's would: pushes to it fail

    kube.kubectl("scale", "-n", ns, "tierlogcluster/demo", "--replicas=3")

    new_broker = f"demo-2.demo-brokers.{ns}.svc:9092"
    wait_for(
        "broker 0 to know broker 2 without its file changing",
        lambda: brokers_known_to(brokers, 0).get(2) == new_broker,
        timeout_s=20,  # the kubelet takes a minute or more; here it never comes
    )
    assert brokers.assignment_file.read_text() == projected
    plan = json.loads(brokers.config_map()["assignment.json"])
    assert sorted(plan["brokers"]) == ["0", "1", "2"]
    assert "demo-1 did not take the partition assignment" in operator.output
    wait_for(  # the broker that did not answer held nothing up
        "three replicas",
        lambda: kube.get_json("statefulset", "demo", "-n", ns)["spec"]["replicas"] == 3,
    )

    brokers.sidecars[1].start()  # back with the old file: the next pass brings the plan
    assert sorted(json.loads(projected)["brokers"]) == ["0", "1"]
    wait_for("broker 1 to know broker 2", lambda: brokers_known_to(brokers, 1).get(2) == new_broker)

    # The kubelet's copy of the same plan (the same generation) is taken as it comes:
    # here its addresses are the sidecars' loopback ones, as this cluster's DNS would say.
    brokers.start(2)
    loopback = f"127.0.0.1:{brokers.ports[2]}"
    for node in (0, 1):
        wait_for(
            f"broker {node} to follow the file",
            lambda node=node: brokers_known_to(brokers, node).get(2) == loopback,  # type: ignore[misc]
        )
