"""Reassignment plans: Kafka's ``kafka-reassign-partitions`` JSON, started and verified.

A plan names each partition's target replicas, in Kafka's document::

    {"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [1, 2, 3]}]}

``start_reassignments`` writes each partition's widened state (``reassignment``) by
compare-and-swap, a topic's in one batch (``write_all_decided``: a write per part it
touches), reading again and deciding again those that lose a race; the controller
completes each one once its target is in sync (``Controller.step``), so starting and
finishing need not be the same process. ``reassignment_progress`` says where each
partition of a plan stands, as ``--verify`` does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping

from tierlog.api.errors import InvalidReplicaAssignmentError
from tierlog.controller.changes import write_all_decided
from tierlog.controller.reassignment import start_reassignment
from tierlog.partition_state.model import PartitionState
from tierlog.partition_state.store import PartitionStateStore
from tierlog.storage.errors import UnknownTopicOrPartitionError
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "COMPLETED",
    "IN_PROGRESS",
    "ReassignmentPlan",
    "current_assignment",
    "plan_from_json",
    "plan_to_json",
    "reassignment_progress",
    "start_reassignments",
]

log = logging.getLogger(__name__)

PLAN_VERSION = 1
COMPLETED = "completed"
IN_PROGRESS = "in progress"

ReassignmentPlan = dict[TopicPartition, tuple[int, ...]]  # -> target replicas


def plan_from_json(text: str) -> ReassignmentPlan:
    """A plan from Kafka's reassignment JSON; ``INVALID_REPLICA_ASSIGNMENT`` naming what
    is wrong otherwise."""
    try:
        document = json.loads(text)
        if document.get("version") != PLAN_VERSION:
            raise ValueError(f"unknown version {document.get('version')!r}")
        plan: ReassignmentPlan = {}
        for entry in document["partitions"]:
            tp = TopicPartition(str(entry["topic"]), int(entry["partition"]))
            replicas = entry["replicas"]
            if not isinstance(replicas, list) or not all(isinstance(r, int) for r in replicas):
                raise ValueError(f"{tp.topic}-{tp.partition}: replicas {replicas!r}")
            if tp in plan:
                raise ValueError(f"{tp.topic}-{tp.partition} is listed twice")
            plan[tp] = tuple(replicas)
        return plan
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise InvalidReplicaAssignmentError(f"not a reassignment plan: {error}") from None


def plan_to_json(plan: Mapping[TopicPartition, tuple[int, ...]]) -> str:
    partitions = [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
        for tp, replicas in sorted(plan.items())
    ]
    return json.dumps({"version": PLAN_VERSION, "partitions": partitions})


def current_assignment(
    store: PartitionStateStore, tps: Collection[TopicPartition]
) -> ReassignmentPlan:
    """The replicas ``tps`` have now (before a reassignment: the plan that undoes it)."""
    return {tp: _read(store, tp).replicas for tp in tps}


def start_reassignments(
    store: PartitionStateStore,
    plan: Mapping[TopicPartition, tuple[int, ...]],
    brokers: Collection[int],
) -> None:
    """Start moving every partition of ``plan`` to its target; ``brokers``: the ids that
    exist. Every target is checked before anything is written."""
    for tp, target in sorted(plan.items()):
        unknown = sorted(set(target) - set(brokers))
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"{tp.topic}-{tp.partition}: brokers {unknown} do not exist "
                f"(the cluster's are {sorted(brokers)})"
            )
        start_reassignment(_read(store, tp), target)  # refuses a target that cannot be
    for topic in sorted({tp.topic for tp in plan}):
        targets = {tp.partition: target for tp, target in plan.items() if tp.topic == topic}
        _start_in_topic(store, topic, targets)


def _start_in_topic(
    store: PartitionStateStore, topic: str, targets: Mapping[int, tuple[int, ...]]
) -> None:
    log.info("Starting the reassignment of %s to replicas %s", topic, dict(sorted(targets.items())))

    def widen(partition: int, state: PartitionState) -> PartitionState | None:
        after = start_reassignment(state, targets[partition])
        return None if after == state else after  # already there, or already moving there

    partitions = store.read_topic(topic)
    asked = {partition: partitions[partition] for partition in targets if partition in partitions}
    write_all_decided(store, topic, asked, widen, "reassignment started")


def reassignment_progress(
    store: PartitionStateStore, plan: Mapping[TopicPartition, tuple[int, ...]]
) -> dict[TopicPartition, str]:
    """Each partition's standing: ``COMPLETED`` on its target, ``IN_PROGRESS`` moving
    there, or what else it is doing (another target)."""
    progress = {}
    for tp, target in sorted(plan.items()):
        state = _read(store, tp)
        if state.replicas == target and not state.reassigning:
            progress[tp] = COMPLETED
        elif state.reassigning and state.target_replicas == target:
            progress[tp] = IN_PROGRESS
        else:
            progress[tp] = f"on replicas {list(state.target_replicas)}, not this plan's"
    return progress


def _read(store: PartitionStateStore, tp: TopicPartition) -> PartitionState:
    partitions = store.read_topic(tp.topic)
    if tp.partition not in partitions:
        raise UnknownTopicOrPartitionError(f"{tp.topic} has no partition {tp.partition}")
    return partitions[tp.partition]
