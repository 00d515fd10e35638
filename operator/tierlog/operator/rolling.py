"""The rolling update: which broker restarts next, if any (pure; ``reconcile`` acts on it).

One broker at a time, and only from a healthy cluster: while any broker is missing,
starting, not ready or already going, nothing else restarts (the PodDisruptionBudget
asks the same of voluntary evictions). A broker runs an outdated version when its pod
carries another config hash than the one the operator renders now. The highest id goes
first, as a StatefulSet's own rolling update orders it. The sidecar still has to say
it is safe before the pod is deleted; that question is asked by the caller.

One exception: an outdated pod whose image cannot be pulled goes first and at once.
Its sidecar never ran, so there is nothing to flush and nobody to ask, and it would
otherwise hold the roll that brings the fixed image forever (``OnDelete``: only the
operator replaces pods), as it is never ready.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tierlog.operator.spec import SecretKeyRef

__all__ = ["BrokerPod", "Roll", "next_restart"]


@dataclass(frozen=True)
class BrokerPod:
    broker_id: int
    name: str
    ready: bool
    config_hash: str
    deleting: bool = False
    address: str = ""  # where its sidecar's gRPC answers (pod IP and grpc port)
    # The security it was started with (its mounted Secrets; see render/security.py).
    tls_secret: str = ""
    token_secret: SecretKeyRef | None = None
    image_pull_failed: bool = False  # its container waits for an image that does not come


@dataclass(frozen=True)
class Roll:
    restart: BrokerPod | None  # the broker to restart now
    waiting: str = ""  # why nothing restarts although something is outdated
    outdated: tuple[int, ...] = ()  # brokers still on an older version

    @property
    def done(self) -> bool:
        return not self.outdated


def next_restart(pods: Sequence[BrokerPod], desired_hash: str, brokers: int) -> Roll:
    """The next step of rolling ``brokers`` pods (ids 0..brokers-1) to ``desired_hash``."""
    by_id = {pod.broker_id: pod for pod in pods if pod.broker_id < brokers}
    outdated = tuple(
        sorted(pod.broker_id for pod in by_id.values() if pod.config_hash != desired_hash)
    )
    if not outdated:
        return Roll(None)
    unpulled = [
        by_id[node]
        for node in outdated
        if by_id[node].image_pull_failed and not by_id[node].deleting
    ]
    if unpulled:
        return Roll(unpulled[-1], "", outdated)
    missing = sorted(set(range(brokers)) - set(by_id))
    if missing:
        return Roll(None, f"broker {missing[0]} has no pod yet", outdated)
    unhealthy = [pod for pod in by_id.values() if pod.deleting or not pod.ready]
    if unhealthy:
        return Roll(None, f"broker {unhealthy[0].broker_id} is not ready", outdated)
    return Roll(by_id[outdated[-1]], "", outdated)
