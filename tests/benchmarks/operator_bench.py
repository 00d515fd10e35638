"""Operator benchmark (issue 30): the API calls of an idle operator, and how soon it acts
on a spec change.

Run with ``.venv/bin/python -m tests.benchmarks.operator_bench [--clusters 10]
[--brokers 1] [--window 300] [--changes 10] [--checkout DIR]``. It starts the tests'
etcd and kube-apiserver (``make tools``) with an audit log, the CRDs, and
``tierlog-operator --standalone`` on one namespace; then ``--clusters`` TierlogClusters
of ``--brokers`` brokers each, every broker a real sidecar with its ready Pod written by
hand (``tests/operator/conftest.py``'s ``Brokers``: no kubelet here). Once every cluster
is Ready and a settling minute has passed, nothing changes for ``--window`` seconds: the
operator's requests in it (the audit log's RequestReceived events of its user, kubectl's
left out) are its idle cost, as calls a minute over the window and the median of its
whole minutes. Then ``--changes`` times, one cluster's ``logDefaults`` changes (kubectl
patch) and the latency is from that patch reaching the API server to the operator's
first write that carries it (its ConfigMap apply naming the new value), both read off
the server's audit clock; the median is printed.

``--checkout DIR`` runs the operator from another source tree (e.g. ``git archive`` of
an older commit), whose package roots go first on its ``PYTHONPATH``: the before/after
figures come from the same script on the same machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from tests.operator.conftest import Brokers, install_crds, start_operator, wait_for
from tests.support.kube import ADMIN_USER, AUDIT_LOG, ControlPlane, start_control_plane

# Every request once as it arrives (counted); ConfigMap writes also once complete, with
# the body they carried (the first action on a change).
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [ResponseStarted, Panic]
rules:
  - level: Request
    resources: [{group: "", resources: [configmaps]}]
    verbs: [create, patch, update]
  - level: Metadata
"""
_PACKAGE_ROOTS = ("operator", "sidecar", "storage", "pipeline")
_SETTLE_S = 60.0  # after the last cluster is Ready: the passes their start woke are done


def _at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def audit_events(plane: ControlPlane) -> list[dict[str, Any]]:
    path = plane.workdir / AUDIT_LOG
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _by_operator(event: dict[str, Any]) -> bool:
    agent = event.get("userAgent", "")
    return event["user"]["username"] == ADMIN_USER and not agent.startswith("kubectl")


def operator_requests(
    plane: ControlPlane, start: datetime.datetime, end: datetime.datetime
) -> list[dict[str, Any]]:
    """The operator's requests that reached the server in [start, end)."""
    return [
        event
        for event in audit_events(plane)
        if event["stage"] == "RequestReceived"
        and _by_operator(event)
        and start <= _at(event["requestReceivedTimestamp"]) < end
    ]


def cluster_document(name: str, brokers: int, retention_ms: int) -> str:
    return json.dumps(
        {
            "apiVersion": "tierlog.io/v1alpha1",
            "kind": "TierlogCluster",
            "metadata": {"name": name},
            "spec": {"brokers": brokers, "logDefaults": {"log.retention.ms": retention_ms}},
        }
    )


def stateful_set(plane: ControlPlane, namespace: str, name: str) -> Any:
    return plane.get_json("statefulset", name, "-n", namespace)


def all_ready(plane: ControlPlane, namespace: str, count: int) -> bool:
    listed = plane.get_json("tierlogclusters", "-n", namespace)["items"]
    ready = [
        body
        for body in listed
        for condition in body.get("status", {}).get("conditions", [])
        if condition["type"] == "Ready" and condition["status"] == "True"
    ]
    return len(ready) == count


@contextmanager
def operator_from(checkout: Path | None) -> Iterator[None]:
    """The operator started inside runs ``checkout``'s code (None: this tree's)."""
    before = os.environ.get("PYTHONPATH")
    if checkout is not None:
        roots = [str(checkout.resolve() / root) for root in _PACKAGE_ROOTS]
        os.environ["PYTHONPATH"] = os.pathsep.join(roots + ([before] if before else []))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def idle_rates(
    plane: ControlPlane, window_s: float
) -> tuple[float, float, Counter[tuple[str, str]]]:
    """Calls a minute over the window, the median of its whole minutes, and the calls by
    (verb, resource)."""
    start = datetime.datetime.now(datetime.UTC)
    time.sleep(window_s)
    end = datetime.datetime.now(datetime.UTC)
    requests = operator_requests(plane, start, end)
    minutes = int(window_s // 60)
    per_minute = [
        len(
            operator_requests(
                plane,
                start + datetime.timedelta(minutes=m),
                start + datetime.timedelta(minutes=m + 1),
            )
        )
        for m in range(minutes)
    ]
    kinds = Counter((e["verb"], e.get("objectRef", {}).get("resource", "")) for e in requests)
    median = statistics.median(per_minute) if per_minute else float("nan")
    return len(requests) * 60 / window_s, median, kinds


def _carries(event: dict[str, Any], name: str, setting: str) -> bool:
    """A completed write of the cluster's ConfigMap by the operator, with ``setting``."""
    return (
        event["stage"] == "ResponseComplete"
        and _by_operator(event)
        and event.get("objectRef", {}).get("name") == f"{name}-config"
        and setting in json.dumps(event.get("requestObject", {}))
    )


def change_latency_s(plane: ControlPlane, namespace: str, name: str, retention_ms: int) -> float:
    """From a kubectl patch of ``name``'s logDefaults to the operator's first ConfigMap
    write carrying it, on the API server's clock."""
    patch = {"spec": {"logDefaults": {"log.retention.ms": retention_ms}}}
    plane.kubectl(
        "patch", "tierlogcluster", name, "-n", namespace, "--type=merge", "-p", json.dumps(patch)
    )
    setting = f"log.retention.ms={retention_ms}"

    def found() -> float | None:
        events = audit_events(plane)
        patched = [
            _at(e["requestReceivedTimestamp"])
            for e in events
            if e["stage"] == "RequestReceived"
            and e["verb"] == "patch"
            and e.get("objectRef", {}).get("resource") == "tierlogclusters"
            and e.get("objectRef", {}).get("name") == name
            and not _by_operator(e)
        ]
        acted = [_at(e["requestReceivedTimestamp"]) for e in events if _carries(e, name, setting)]
        if not patched or not acted:
            return None
        return (min(acted) - patched[-1]).total_seconds()

    latency: float = wait_for(f"the operator to act on {name}", found, timeout_s=120)
    return latency


def run(args: argparse.Namespace, workdir: Path) -> None:
    plane = start_control_plane(workdir / "kube", audit_policy=AUDIT_POLICY)
    brokers: list[Brokers] = []
    try:
        install_crds(plane)
        namespace = plane.create_namespace("bench")
        with operator_from(args.checkout):
            operator = start_operator(plane, namespace, workdir / "operator.log", "--standalone")
        try:
            names = [f"c{index}" for index in range(args.clusters)]
            for name in names:
                document = cluster_document(name, args.brokers, 604800000)
                plane.kubectl("apply", "-n", namespace, "-f", "-", input=document)
            for name in names:
                wait_for(f"{name}'s StatefulSet", partial(stateful_set, plane, namespace, name))
                cluster = Brokers(plane, namespace, name, workdir / f"brokers-{name}")
                cluster.workdir.mkdir(parents=True)
                brokers.append(cluster)
                for node in range(args.brokers):
                    cluster.start(node)
            wait_for(
                "every cluster Ready",
                lambda: all_ready(plane, namespace, args.clusters),
                timeout_s=300,
            )
            time.sleep(_SETTLE_S)
            rate, median, kinds = (
                idle_rates(plane, args.window) if args.window > 0 else (0, 0, Counter())
            )
            latencies = [
                change_latency_s(plane, namespace, names[i % len(names)], 3600000 + i)
                for i in range(args.changes)
            ]
        finally:
            operator.stop()
    finally:
        for cluster in brokers:
            cluster.kill_all()
        plane.stop()
    source = str(args.checkout) if args.checkout else "this checkout"
    print(f"\noperator from {source}: {args.clusters} clusters x {args.brokers} brokers, idle")
    print("| figure | value |\n|---|---|")
    print(f"| API calls a minute over {args.window:.0f} s | {rate:.1f} |")
    print(f"| median of its whole minutes | {median:.0f} |")
    latency = statistics.median(latencies)
    print(f"| spec change -> first action, median of {len(latencies)} | {latency * 1000:.0f} ms |")
    print(f"| (each, ms) | {', '.join(f'{s * 1000:.0f}' for s in latencies)} |")
    print("\ncalls in the window by verb and resource:")
    for (verb, resource), count in kinds.most_common():
        print(f"  {verb:>6} {resource}: {count}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--brokers", type=int, default=1, help="brokers per cluster")
    parser.add_argument(
        "--window", type=float, default=300, help="idle seconds counted (0: latency only)"
    )
    parser.add_argument("--changes", type=int, default=10, help="spec changes timed")
    parser.add_argument("--checkout", type=Path, help="run the operator from this tree")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="operator-bench-"))
    try:
        run(args, workdir)
    finally:
        if args.keep:
            print(f"work directory: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
