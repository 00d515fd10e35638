"""Every change to a set of pods, as a ``kubectl get pods --watch`` saw it.

A roll is judged from its history, not from snapshots: polling could miss the moment two
brokers were down together. ``watching_pods`` runs the watch in a background process for
the length of a ``with`` block; ``PodHistory`` replays its events in order.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.tools.control_plane import kubectl_bin

__all__ = ["PodEvent", "PodHistory", "watching_pods"]


@dataclass(frozen=True)
class PodEvent:
    kind: str  # ADDED, MODIFIED, DELETED
    pod: str
    uid: str
    ready: bool  # Ready and not being deleted: a pod on its way out serves nobody

    @classmethod
    def from_watch(cls, event: dict[str, Any]) -> PodEvent:
        pod = event["object"]
        conditions = pod.get("status", {}).get("conditions", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        going = "deletionTimestamp" in pod["metadata"] or event["type"] == "DELETED"
        meta = pod["metadata"]
        return cls(event["type"], meta["name"], meta["uid"], ready and not going)


@dataclass(frozen=True)
class PodHistory:
    events: list[PodEvent]

    def most_not_ready(self, pods: list[str]) -> tuple[int, list[PodEvent]]:
        """The most of ``pods`` not ready at once after each had been seen, and the
        events up to that moment (what a failure prints)."""
        ready: dict[str, bool] = {}
        worst, worst_at = 0, 0
        for index, event in enumerate(self.events):
            ready[event.pod] = event.ready
            if set(pods) <= ready.keys():
                down = sum(not ready[pod] for pod in pods)
                if down > worst:
                    worst, worst_at = down, index
        return worst, self.events[: worst_at + 1]

    def restart_order(self) -> list[str]:
        """The pods in the order their first replacement appeared (a new uid)."""
        first_uid: dict[str, str] = {}
        order: list[str] = []
        for event in self.events:
            first_uid.setdefault(event.pod, event.uid)
            if event.uid != first_uid[event.pod] and event.pod not in order:
                order.append(event.pod)
        return order


def _events(text: str) -> list[PodEvent]:
    """kubectl's ``-o json`` watch prints one JSON document after another (the last
    one may be half written while the watch runs)."""
    decoder, position, events = json.JSONDecoder(), 0, []
    text = text.strip()
    while position < len(text):
        try:
            event, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            break
        events.append(PodEvent.from_watch(event))
        position = end
        while position < len(text) and text[position].isspace():
            position += 1
    return events


@contextmanager
def watching_pods(
    kubeconfig: Path, namespace: str, selector: str, work: Path, pods: int
) -> Iterator[list[PodHistory]]:
    """Watch the pods during the block, from once the watch has listed ``pods`` of them;
    the one-element list gets the history after."""
    history: list[PodHistory] = []
    command = [
        str(kubectl_bin()), f"--kubeconfig={kubeconfig}", "get", "pods", "-n", namespace,
        "-l", selector, "--watch", "--output-watch-events", "-o", "json",
    ]  # fmt: skip
    log, errors = work / "watch.json", work / "watch.err"
    with log.open("w") as out, errors.open("w") as err:
        watch = subprocess.Popen(command, stdout=out, stderr=err, text=True)
    try:
        deadline = time.monotonic() + 30
        while len(_events(log.read_text())) < pods:  # the watch's first list, whole
            assert watch.poll() is None, f"kubectl --watch exited: {errors.read_text()}"
            assert time.monotonic() < deadline, f"not {pods} pods listed: {log.read_text()}"
            time.sleep(0.2)
        yield history
    finally:
        watch.terminate()
        watch.wait(timeout=20)
    history.append(PodHistory(_events(log.read_text())))
