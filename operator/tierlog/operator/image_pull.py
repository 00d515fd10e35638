"""Broker pods whose image cannot be pulled, as their kubelet reports it (pure).

A wrong tag, a private registry without its pull Secret, or an image that exists only on
another machine leaves a broker's container waiting with one of the kubelet's reasons,
for as long as nobody fixes the spec. The pod itself only says "not ready": these name
the pod, the image and the kubelet's words, for the cluster's ``Degraded`` condition and a
Warning Event, where ``kubectl describe tierlogcluster`` shows them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tierlog.operator.conditions import DEGRADED, Condition
from tierlog.operator.events import Event

__all__ = ["PULL_FAILED", "PULL_FAILURE_REASONS", "PullFailure", "condition", "events", "of_pod"]

PULL_FAILED = "ImagePullFailed"  # the condition's and the Event's reason
# containerStatuses[].state.waiting.reason of a container whose image does not come.
PULL_FAILURE_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
_MESSAGE_CHARS = 2000  # a condition's message (the kubelet's words can be long)


@dataclass(frozen=True)
class PullFailure:
    pod: str
    image: str
    reason: str  # the kubelet's, e.g. ImagePullBackOff
    message: str  # the kubelet's, e.g. the registry's answer

    def describe(self) -> str:
        said = f": {self.message}" if self.message else ""
        return f"{self.pod} cannot pull image {self.image} ({self.reason}{said})"


def of_pod(pod: Mapping[str, Any]) -> list[PullFailure]:
    """The containers of ``pod`` waiting for an image that does not come."""
    name = pod["metadata"]["name"]
    images = {
        container.get("name", ""): container.get("image", "")
        for container in (pod.get("spec") or {}).get("containers") or ()
    }
    failures = []
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_FAILURE_REASONS:
            image = images.get(status.get("name", "")) or status.get("image", "")
            failures.append(PullFailure(name, image, waiting["reason"], waiting.get("message", "")))
    return failures


def condition(failures: Sequence[PullFailure]) -> Condition | None:
    """``Degraded`` naming every pod that cannot pull and its image; None without any."""
    if not failures:
        return None
    message = "; ".join(failure.describe() for failure in failures)
    return Condition(DEGRADED, True, PULL_FAILED, message[:_MESSAGE_CHARS])


def events(failures: Iterable[PullFailure]) -> list[Event]:
    """A Warning for each pod and image, posted when its failure begins (the kubelet's
    reason alternates between ErrImagePull and ImagePullBackOff while it retries)."""
    return [
        Event(True, PULL_FAILED, failure.describe(), state_of=f"{failure.pod}: {failure.image}")
        for failure in failures
    ]
