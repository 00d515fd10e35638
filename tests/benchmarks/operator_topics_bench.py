"""Operator benchmark (issue 32): what 1,000 TierlogTopics of one cluster cost the operator.

Run with ``.venv/bin/python -m tests.benchmarks.operator_topics_bench [--topics 1000]
[--brokers 1] [--idle 60] [--checkout DIR]``. The set-up is ``operator_bench``'s (the
tests' etcd and kube-apiserver with an audit log, ``tierlog-operator --standalone``, real
sidecars with their Pods written by hand), with one TierlogCluster and ``--topics``
TierlogTopics of one partition each. For each phase it counts the operator's requests to
the API server (the audit log), its calls to the brokers (those its ``PodPort``s
forwarded), its topic passes (its metrics) and its CPU seconds (``/proc``):

- start-up: every topic applied at once, until all are Ready and the operator is quiet;
- idle: ``--idle`` seconds in which nothing changes;
- a broker pod event: one annotation on broker 0's Pod (a watch event, as the kubelet's
  status writes are), until quiet;
- one topic's spec change: its partitions 1 -> 2, until it is Ready with 2 and quiet.

"Quiet": every topic pass started has finished, and none started or finished for
``_QUIET_S`` (a benchmark's settling, not a test's proof). ``--checkout`` runs the
operator from another tree, as in ``operator_bench``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tests.benchmarks.operator_bench import (
    AUDIT_POLICY,
    all_ready,
    cluster_document,
    operator_from,
    operator_requests,
    stateful_set,
)
from tests.operator.conftest import Brokers, RunningOperator, install_crds, start_operator, wait_for
from tests.support.kube import ControlPlane, start_control_plane

_QUIET_S = 10.0
_CLUSTER = "c"


def topics_document(count: int) -> str:
    items = [
        {
            "apiVersion": "tierlog.io/v1alpha1",
            "kind": "TierlogTopic",
            "metadata": {"name": f"t{index}"},
            "spec": {"cluster": _CLUSTER, "partitions": 1},
        }
        for index in range(count)
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def ready_topics(plane: ControlPlane, namespace: str) -> dict[str, int]:
    """Ready topics -> the partitions their status reports."""
    listed = plane.get_json("tierlogtopics", "-n", namespace)["items"]
    return {
        body["metadata"]["name"]: int(body["status"].get("partitions", 0))
        for body in listed
        for condition in body.get("status", {}).get("conditions", [])
        if condition["type"] == "Ready" and condition["status"] == "True"
    }


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    name: str
    seconds: float
    api_calls: Counter[tuple[str, str]]
    broker_calls: Counter[str]
    topic_passes: int
    cpu_s: float


class Meter:
    def __init__(self, plane: ControlPlane, operator: RunningOperator, brokers: Brokers):
        self.plane, self.operator, self.brokers = plane, operator, brokers

    def _snapshot(self) -> tuple[datetime.datetime, Counter[str], int, float]:
        return (
            datetime.datetime.now(datetime.UTC),
            self.brokers.admin_calls(),
            self.operator.passes("TierlogTopic")[0],
            cpu_s(self.operator.process.pid),
        )

    def until_quiet(self) -> None:
        """Until every topic pass started has finished, and none started for a while (a
        thousand passes queued on the API client can finish none for seconds)."""
        last, since = self.operator.passes("TierlogTopic"), time.monotonic()
        while time.monotonic() - since < _QUIET_S or last[0] != last[1]:
            time.sleep(1)
            now = self.operator.passes("TierlogTopic")
            if now != last:
                last, since = now, time.monotonic()

    def phase(self, name: str, act: Callable[[], None]) -> Phase:
        start, calls, passes, cpu = self._snapshot()
        act()
        end, calls_after, passes_after, cpu_after = self._snapshot()
        requests = operator_requests(self.plane, start, end)
        api = Counter((e["verb"], e.get("objectRef", {}).get("resource", "")) for e in requests)
        return Phase(
            name,
            (end - start).total_seconds(),
            api,
            calls_after - calls,
            passes_after - passes,
            cpu_after - cpu,
        )


def run(args: argparse.Namespace, workdir: Path) -> list[Phase]:
    plane = start_control_plane(workdir / "kube", audit_policy=AUDIT_POLICY)
    brokers: Brokers | None = None
    try:
        install_crds(plane)
        namespace = plane.create_namespace("bench")
        with operator_from(args.checkout):
            operator = start_operator(plane, namespace, workdir / "operator.log", "--standalone")
        try:
            document = cluster_document(_CLUSTER, args.brokers, 604800000)
            plane.kubectl("apply", "-n", namespace, "-f", "-", input=document)
            wait_for("the StatefulSet", partial(stateful_set, plane, namespace, _CLUSTER))
            brokers = Brokers(plane, namespace, _CLUSTER, workdir / "brokers")
            brokers.workdir.mkdir(parents=True)
            for node in range(args.brokers):
                brokers.start(node)
            wait_for("the cluster Ready", lambda: all_ready(plane, namespace, 1), timeout_s=300)
            meter = Meter(plane, operator, brokers)
            return measure(args, plane, namespace, meter, brokers)
        finally:
            operator.stop()
    finally:
        if brokers is not None:
            brokers.kill_all()
        plane.stop()


def measure(
    args: argparse.Namespace, plane: ControlPlane, namespace: str, meter: Meter, brokers: Brokers
) -> list[Phase]:
    ready_after: list[float] = []

    def start_up() -> None:
        began = time.monotonic()
        plane.kubectl("apply", "-n", namespace, "-f", "-", input=topics_document(args.topics))
        wait_for(
            f"{args.topics} topics Ready",
            lambda: len(ready_topics(plane, namespace)) == args.topics,
            timeout_s=1800,
        )
        ready_after.append(time.monotonic() - began)
        meter.until_quiet()

    def pod_event() -> None:
        plane.kubectl(
            "annotate", "pod", f"{_CLUSTER}-0", "-n", namespace, "--overwrite",
            f"bench.tierlog.io/event={time.monotonic_ns()}",
        )  # fmt: skip
        meter.until_quiet()

    def spec_change() -> None:
        patch = json.dumps({"spec": {"partitions": 2}})
        plane.kubectl("patch", "tierlogtopic", "t0", "-n", namespace, "--type=merge", "-p", patch)
        wait_for("t0 grown", lambda: ready_topics(plane, namespace).get("t0") == 2, 300)
        meter.until_quiet()

    phases = [meter.phase("start-up", start_up)]
    print(f"all {args.topics} topics Ready {ready_after[0]:.1f} s after they were applied")
    phases.append(meter.phase("idle", partial(time.sleep, args.idle)))
    phases.append(meter.phase("broker pod event", pod_event))
    phases.append(meter.phase("one topic's spec change", spec_change))
    return phases


def report(args: argparse.Namespace, phases: list[Phase], load: tuple[float, ...]) -> None:
    source = str(args.checkout) if args.checkout else "this checkout"
    print(f"\noperator from {source}: 1 cluster x {args.brokers} brokers, {args.topics} topics")
    print(f"load average at start {load[0]:.1f}, at end {os.getloadavg()[0]:.1f}")
    print("| phase | seconds | API calls | broker calls | topic passes | operator CPU s |")
    print("|---|---|---|---|---|---|")
    for phase in phases:
        print(
            f"| {phase.name} | {phase.seconds:.0f} | {phase.api_calls.total()} | "
            f"{phase.broker_calls.total()} | {phase.topic_passes} | {phase.cpu_s:.1f} |"
        )
    for phase in phases:
        print(f"\n{phase.name}: API {dict(phase.api_calls.most_common(6))}")
        calls = {method.rpartition("/")[2]: n for method, n in phase.broker_calls.items()}
        print(f"{phase.name}: brokers {calls}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--idle", type=float, default=60, help="idle seconds counted")
    parser.add_argument("--checkout", type=Path, help="run the operator from this tree")
    args = parser.parse_args()
    load = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="operator-topics-bench-"))
    try:
        phases = run(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(args, phases, load)


if __name__ == "__main__":
    main()
