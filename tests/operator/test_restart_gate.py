"""A rolling restart waits for the sidecar to say it is safe: the operator as a process
against the real API server, with real sidecars as brokers (the test plays the kubelet,
see ``Brokers`` in conftest.py).

A broker is not safe while closed segments of a tiered partition wait for the tier. Here
the tier (``file://``) goes away after the topic is created, as an unreachable S3 would:
the broker takes writes, its uploads fail and back off, and the operator defers the
restart. With the tier back the uploads go through, the sidecar says safe and the pod
is deleted. The sidecars' uploader runs every 200 ms and retries within 500 ms (Kafka's
30 s would only make the test slow).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.operator.conftest import Brokers, RunningOperator, shared_file_tier, wait_for
from tests.operator.test_handlers import (
    apply,
    cluster,
    condition,
    events,
    get,
    ready_cluster,
    wait_ready,
)
from tests.operator.test_handlers import topic as topic_resource
from tests.support.kube import ControlPlane
from tierlog.client import AdminClient, Producer

pytestmark = pytest.mark.slow

FAST_UPLOADER = (
    "remote.log.manager.task.interval.ms=200",
    "remote.log.manager.task.retry.backoff.ms=100",
    "remote.log.manager.task.retry.backoff.max.ms=500",
)
CHANGED = {"log.retention.ms": 3600000}


def _produce(address: str, count: int) -> None:
    with Producer({"bootstrap.servers": address, "linger.ms": 5, "batch.size": 1024}) as producer:
        sent = [producer.send("orders", b"order %-100d" % i) for i in range(count)]
        producer.flush()
        assert all(future.result(timeout=10) for future in sent)


def _progressing(kube: ControlPlane, ns: str) -> dict[str, Any]:
    return condition(get(kube, ns, "tierlogcluster", "demo"), "Progressing")


def _reasons(kube: ControlPlane, ns: str, reason: str) -> list[str]:
    return [message for found, message in events(kube, ns) if found == reason]


def _unsafe(kube: ControlPlane, ns: str) -> list[str]:
    """RestartDeferred because the sidecar said not safe (on a loaded machine a call may
    also time out: deferred too, another Event)."""
    deferred = _reasons(kube, ns, "RestartDeferred")
    return [message for message in deferred if "demo-0 is not safe to restart yet" in message]


def test_a_restart_waits_until_the_tier_holds_the_closed_segments(
    kube: ControlPlane,
    operator: RunningOperator,
    brokers_for: Callable[..., Brokers],
    tmp_path: Path,
) -> None:
    ns = operator.namespace
    brokers = brokers_for(ns, "demo", *FAST_UPLOADER)
    tier_dir, away = tmp_path / "tier", tmp_path / "tier-away"
    tier = shared_file_tier(tier_dir)
    ready_cluster(kube, ns, brokers, "demo", 1, tier=tier)
    configs = {"remote.storage.enable": True, "segment.bytes": 4096}
    apply(kube, ns, topic_resource("orders", "demo", 1, **configs))
    wait_for(
        "the topic Ready",
        lambda: condition(get(kube, ns, "tierlogtopic", "orders"), "Ready")["status"] == "True",
    )
    tier_dir.rename(away)
    tier_dir.write_text("not a directory: every write to the tier fails")
    address = brokers.sidecars[0].address
    _produce(address, 200)  # ~22 KB: several closed 4 KiB segments
    with AdminClient(address) as admin:
        readiness = admin.prepare_restart()
    assert not readiness.safe and readiness.segments_awaiting_upload > 0, readiness

    apply(kube, ns, cluster("demo", brokers=1, tier=tier, logDefaults=CHANGED))
    (deferred,) = wait_for("a deferred restart", lambda: _unsafe(kube, ns))
    assert "segments waiting for the tier" in deferred
    operator.wait_for_a_pass()  # the next, which would restart it were it safe now
    assert brokers.pod_exists(0)
    progressing = wait_for(
        "the condition saying why",
        lambda: (
            _progressing(kube, ns)["message"].endswith("segments waiting for the tier")
            and _progressing(kube, ns)
        ),
    )
    assert progressing["reason"] == "RollingUpdate"
    assert "waiting: demo-0 is not safe to restart yet" in progressing["message"]
    assert "restarting" not in progressing["message"]
    assert len(_unsafe(kube, ns)) == 1  # posted once, not on every pass
    assert _reasons(kube, ns, "RestartingBroker") == []

    tier_dir.unlink()
    away.rename(tier_dir)  # the tier is back: the uploads go through
    wait_for("broker 0's pod deleted", lambda: not brokers.pod_exists(0), timeout_s=30)
    with AdminClient(address) as admin:  # what the operator was told before deleting
        assert admin.prepare_restart().safe
    (restarting,) = _reasons(kube, ns, "RestartingBroker")
    assert "restarting demo-0" in restarting and "flushed and safe" in restarting
    brokers.stop(0)
    brokers.start(0)

    body = wait_ready(kube, ns, "demo", "Ready after the restart")
    assert {b["configHash"] for b in body["status"]["brokers"]} == {body["status"]["configHash"]}


def test_a_broker_that_does_not_answer_defers_its_restart_and_the_status_says_so(
    kube: ControlPlane, operator: RunningOperator, brokers_for: Callable[..., Brokers]
) -> None:
    ns = operator.namespace
    brokers = brokers_for(ns, "demo")
    ready_cluster(kube, ns, brokers, "demo", 1)
    brokers.stop(0)  # its Pod stays Ready: no kubelet here to notice
    apply(kube, ns, cluster("demo", brokers=1, logDefaults=CHANGED))

    def waiting() -> dict[str, Any] | None:
        body = get(kube, ns, "tierlogcluster", "demo")
        return body if body["status"]["observedGeneration"] == 2 else None

    body = wait_for("the status of the new generation", waiting)
    message = condition(body, "Progressing")["message"]
    assert "waiting: demo-0 does not answer whether it is safe to restart" in message, message
    assert condition(body, "Degraded")["status"] == "False"
    (deferred,) = wait_for("the Event", lambda: _reasons(kube, ns, "RestartDeferred"))
    assert "demo-0 does not answer" in deferred
    assert brokers.pod_exists(0)

    brokers.sidecars[0].start()  # back on the same address, the Pod untouched: safe
    wait_for("broker 0's pod deleted", lambda: not brokers.pod_exists(0))
