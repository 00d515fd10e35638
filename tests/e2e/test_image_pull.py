"""A broker image that cannot be pulled, on a real node: the kubelet's ``ErrImagePull`` /
``ImagePullBackOff`` reach the TierlogCluster's ``Degraded`` and ``Ready`` conditions and a
Warning Event naming the pod and the image; once the spec drops the image, the brokers
run the chart's (the node's) image, the stuck pod is replaced and the cluster is Ready."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.e2e.conftest import Node

pytestmark = pytest.mark.e2e

# .invalid never resolves (RFC 2606), and nothing leaves this machine anyway.
UNPULLABLE = "registry.invalid/tierlog/tierlog:no-such-tag"


def _condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in body["status"]["conditions"] if c["type"] == kind)
    return found


def test_an_unpullable_image_is_named_in_status_and_events_until_the_spec_drops_it(
    one_node: Node, operator: str
) -> None:
    namespace = one_node.create_namespace("unpulled")
    cluster = {
        "apiVersion": "tierlog.io/v1alpha1",
        "kind": "TierlogCluster",
        "metadata": {"name": "unpulled"},
        "spec": {"brokers": 1, "image": UNPULLABLE},
    }
    try:
        started = time.monotonic()
        one_node.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(cluster))
        one_node.wait(
            namespace,
            '--for=jsonpath={.status.conditions[?(@.type=="Degraded")].reason}=ImagePullFailed',
            "tierlogcluster/unpulled",
        )
        print(f"\nImagePullFailed in the status {time.monotonic() - started:.1f} s after apply")
        body = json.loads(
            one_node.kubectl("get", "tierlogcluster", "unpulled", "-n", namespace, "-o", "json")
        )
        named = f"unpulled-0 cannot pull image {UNPULLABLE}"
        story = one_node.story(namespace)
        assert named in _condition(body, "Degraded")["message"], story
        ready = _condition(body, "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "ImagePullFailed"), story
        listed = one_node.kubectl(
            "get", "events", "-n", namespace, "--field-selector=reason=ImagePullFailed",
            "-o", "json",
        )  # fmt: skip
        warnings = [
            event
            for event in json.loads(listed)["items"]
            if event["type"] == "Warning" and event["involvedObject"]["name"] == "unpulled"
        ]
        assert warnings and named in warnings[0]["message"], story

        # Without spec.image the brokers run the chart's image, which the node holds: the
        # operator replaces the pod that never started, and the cluster becomes Ready.
        one_node.kubectl(
            "patch", "tierlogcluster", "unpulled", "-n", namespace, "--type=json",
            "-p", '[{"op": "remove", "path": "/spec/image"}]',
        )  # fmt: skip
        one_node.wait(namespace, "--for=condition=Ready", "tierlogcluster/unpulled")
        pod = json.loads(
            one_node.kubectl("get", "pod", "unpulled-0", "-n", namespace, "-o", "json")
        )
        assert pod["spec"]["containers"][0]["image"] == one_node.image
        body = json.loads(
            one_node.kubectl("get", "tierlogcluster", "unpulled", "-n", namespace, "-o", "json")
        )
        assert _condition(body, "Degraded")["status"] == "False", one_node.story(namespace)
    finally:
        one_node.kubectl("delete", "namespace", namespace, "--timeout=180s")
