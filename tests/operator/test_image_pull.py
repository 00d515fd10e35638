"""A broker pod waiting for an image that does not come is named, with its image."""

from __future__ import annotations

from typing import Any

from tierlog.operator.events import to_post
from tierlog.operator.image_pull import PULL_FAILED, condition, events, of_pod

IMAGE = "ghcr.io/tierlog/tierlog:0.1.0"


def pod(name: str, **waiting: str) -> dict[str, Any]:
    state = {"waiting": waiting} if waiting else {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "tierlog", "image": IMAGE}]},
        "status": {"containerStatuses": [{"name": "tierlog", "image": IMAGE, "state": state}]},
    }


def test_each_of_the_kubelets_pull_reasons_is_a_failure_naming_pod_and_image() -> None:
    for reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"):
        [failure] = of_pod(pod("demo-1", reason=reason, message="not found"))
        assert (failure.pod, failure.image, failure.reason) == ("demo-1", IMAGE, reason)
        assert failure.describe() == f"demo-1 cannot pull image {IMAGE} ({reason}: not found)"


def test_running_or_otherwise_waiting_containers_are_no_pull_failure() -> None:
    assert of_pod(pod("demo-0")) == []
    assert of_pod(pod("demo-0", reason="ContainerCreating")) == []
    assert of_pod({"metadata": {"name": "demo-0"}, "spec": {}}) == []  # not scheduled yet


def test_the_degraded_condition_names_every_pod_and_its_image() -> None:
    failures = [
        *of_pod(pod("demo-0", reason="ImagePullBackOff", message=f'Back-off pulling "{IMAGE}"')),
        *of_pod(pod("demo-1", reason="ErrImagePull")),
    ]
    degraded = condition(failures)
    assert degraded is not None
    assert (degraded.type, degraded.status, degraded.reason) == ("Degraded", True, PULL_FAILED)
    assert f"demo-0 cannot pull image {IMAGE}" in degraded.message
    assert f"demo-1 cannot pull image {IMAGE} (ErrImagePull)" in degraded.message
    assert condition([]) is None


def test_one_warning_per_pod_while_the_kubelet_alternates_its_reasons() -> None:
    standing: frozenset[tuple[str, str]] = frozenset()
    posted = []
    for reason in ("ErrImagePull", "ImagePullBackOff", "ErrImagePull"):
        fresh, standing = to_post(events(of_pod(pod("demo-0", reason=reason))), standing)
        posted += fresh
    assert [(event.warning, event.reason) for event in posted] == [(True, PULL_FAILED)]
    assert IMAGE in posted[0].message and "demo-0" in posted[0].message
