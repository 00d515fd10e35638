"""One pass over a TierlogCluster: read, plan, apply, roll, and the status to write.

Level-based: every pass starts from what the API server and the brokers say now, so
a pass interrupted anywhere is finished by the next one, and the operator can restart
at any time. The handlers (``handlers.py``) run passes on watched changes and on a
timer: a short one while a pass waits on what only the brokers can tell
(``Pass.polls_brokers``), a long one otherwise.

The partition assignment goes to the brokers twice: into the ConfigMap (what a
starting broker reads), and, right after, over gRPC to every ready broker, since a
mounted ConfigMap reaches a running pod only a minute or so later. Each pass pushes
again; a broker takes a plan only if it is newer than its own
(``tierlog.sidecar.assignment_updates``), so repeats cost one small call, and a broker
that missed a push (down, restarting) gets the plan on the next pass or from its file.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tierlog.client.admin import AssignmentUpdate
from tierlog.controller.reassignments import start_reassignments
from tierlog.operator import brokers, image_pull
from tierlog.operator.assignment import NO_OWNER, Assignment, stamped
from tierlog.operator.broker_security import BrokerSecurity
from tierlog.operator.conditions import DEGRADED, PAUSED, PROGRESSING, READY, Condition, merge
from tierlog.operator.config import OperatorConfig, OperatorPeer
from tierlog.operator.events import Event
from tierlog.operator.kube import Kube
from tierlog.operator.partition_controller import cluster_store
from tierlog.operator.pods import broker_pod
from tierlog.operator.render.common import (
    Owner,
    broker_address,
    broker_kafka_address,
    config_map_name,
    selector_labels,
)
from tierlog.operator.render.configmap import ASSIGNMENT_FILE, config_map
from tierlog.operator.render.monitoring import SERVICE_MONITOR_CRD, service_monitor
from tierlog.operator.render.policy import network_policy, pod_disruption_budget
from tierlog.operator.render.rbac import (
    broker_service_account,
    partition_state_role,
    partition_state_role_binding,
    scram_credentials_secret,
)
from tierlog.operator.render.services import client_service, headless_service
from tierlog.operator.render.statefulset import desired_config_hash, stateful_set
from tierlog.operator.rolling import BrokerPod, Roll, next_restart
from tierlog.operator.scaling import (
    DRAINING,
    HANDING_OVER,
    REASSIGNING,
    ScalePlan,
    plan_replicated_scale,
    plan_scale,
)
from tierlog.operator.spec import ClusterSpec, TopicSpec
from tierlog.partition_state.model import NO_LEADER, PartitionState
from tierlog.partition_state.store import PartitionStateStore
from tierlog.storage.errors import UnknownTopicOrPartitionError
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "PAUSE_ANNOTATION",
    "Pass",
    "failed_status",
    "is_paused",
    "paused_status",
    "reconcile_cluster",
    "status_conditions",
]

log = logging.getLogger("tierlog.operator")

PAUSE_ANNOTATION = "tierlog.io/pause-reconciliation"
_MESSAGE_CHARS = 2000  # an error's text in a condition (an API server's can be long)
_UNSAFE = "not safe"  # a deferred restart's cause when the sidecar answers


@dataclass
class Pass:
    """What a pass leaves behind: the status to write and the events to post."""

    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    # It waits on something no watch shows (a sidecar safe to restart, a drain, a plan a
    # ready broker did not take): the next pass comes soon, not at the next resync.
    polls_brokers: bool = False


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def is_paused(body: Mapping[str, Any]) -> bool:
    annotations = body["metadata"].get("annotations") or {}
    return str(annotations.get(PAUSE_ANNOTATION, "")).lower() == "true"


def status_conditions(body: Mapping[str, Any], desired: list[Condition]) -> list[dict[str, Any]]:
    existing = (body.get("status") or {}).get("conditions") or []
    return merge(existing, desired, body["metadata"].get("generation", 0), now())


def paused_status(body: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "conditions": status_conditions(
            body,
            [
                Condition(
                    PAUSED,
                    True,
                    "PausedByAnnotation",
                    f"{PAUSE_ANNOTATION}=true: nothing is applied, rolled or scaled",
                )
            ],
        )
    }


def failed_status(body: Mapping[str, Any], error: BaseException) -> dict[str, Any]:
    """The status of a pass that raised: Degraded, saying what failed (the pass is retried,
    and the next one that gets through sets Degraded from what it finds)."""
    message = f"the last pass failed and is retried: {type(error).__name__}: {error}"
    return {
        "conditions": status_conditions(
            body, [Condition(DEGRADED, True, "ReconcileFailed", message[:_MESSAGE_CHARS])]
        )
    }


async def _topics_of(kube: Kube, cluster: ClusterSpec) -> list[TopicSpec]:
    found = [TopicSpec.from_resource(body) for body in await kube.topics(cluster.namespace)]
    return [topic for topic in found if topic.cluster == cluster.name]


async def _previous_assignment(kube: Kube, cluster: ClusterSpec) -> Assignment | None:
    data = await kube.config_map_data(cluster.namespace, config_map_name(cluster))
    if not data or ASSIGNMENT_FILE not in data:
        return None
    return Assignment.from_json(data[ASSIGNMENT_FILE])


async def _partition_states(cluster: ClusterSpec) -> dict[TopicPartition, PartitionState]:
    """Each partition's state in the cluster's partition-state store (none before the
    brokers made it)."""
    store = cluster_store(cluster.namespace, cluster.name)
    return await asyncio.to_thread(_read_every_partition, store)


def _read_every_partition(store: PartitionStateStore) -> dict[TopicPartition, PartitionState]:
    states = {}
    for topic in store.list_topics():
        try:
            partitions = store.read_topic(topic)
        except UnknownTopicOrPartitionError:
            continue  # deleted since it was listed
        states.update({TopicPartition(topic, p): state for p, state in partitions.items()})
    return states


async def _start_reassignments(cluster: ClusterSpec, scale: ScalePlan, brokers: int) -> list[Event]:
    """Start the moves a replicated scale-down waits for (the operator's controller
    completes them); an Event naming them."""
    if not scale.reassign:
        return []
    store = cluster_store(cluster.namespace, cluster.name)
    await asyncio.to_thread(start_reassignments, store, scale.reassign, range(brokers))
    started = sorted(scale.reassign.items())
    moves = "; ".join(f"{tp.topic}-{tp.partition} to {list(to)}" for tp, to in started[:10])
    more = f" and {len(scale.reassign) - 10} more" if len(scale.reassign) > 10 else ""
    message = (
        f"moving replicas off brokers {list(scale.draining)} before their pods go: "
        f"{moves}{more}; each completes once its new replicas are in sync"
    )
    return [Event(False, "ReassignmentStarted", message)]


ZONE_LABEL = "topology.kubernetes.io/zone"


async def _broker_racks(
    kube: Kube, listed: list[dict[str, Any]], previous: Assignment | None
) -> dict[int, str]:
    """Each broker's rack: the zone of the node its pod runs on (Strimzi's rack awareness),
    where the node says one; a broker whose pod is not scheduled now keeps the rack the
    previous plan gave it (a restarting pod does not change the plan)."""
    racks = dict(previous.racks) if previous is not None else {}
    zones: dict[str, str] = {}  # node -> zone, each node read once a pass
    for pod in listed:
        broker, node = broker_pod(pod), (pod.get("spec") or {}).get("nodeName")
        if broker is None or not node:
            continue
        if node not in zones:
            zones[node] = (await kube.node_labels(node)).get(ZONE_LABEL, "")
        if zones[node]:
            racks[broker.broker_id] = zones[node]
        else:
            racks.pop(broker.broker_id, None)
    return racks


async def _drain_waits(
    cluster: ClusterSpec,
    current: int | None,
    pods: Mapping[int, BrokerPod],
    topics: list[str],
    security: BrokerSecurity,
) -> dict[int, str]:
    """What each leaving broker is still waiting for, if anything: a broker that owns
    nothing any more and says it is safe (flushed, all in the tier) is absent."""
    if current is None or cluster.brokers >= current or cluster.tier is None:
        return {}
    waits = {}
    for node in range(cluster.brokers, current):
        pod = pods.get(node)
        if pod is None or not pod.ready or not pod.address:
            waits[node] = "its pod is not ready"
            continue
        try:
            pod_security = await security.for_pod(pod)
            owned = await brokers.owned_partitions(pod.address, topics, security=pod_security)
            if owned:
                waits[node] = f"it still serves {owned} partitions (the new plan not read yet)"
                continue
            readiness = await brokers.prepare_restart(pod.address, security=pod_security)
        except Exception as error:  # unreachable: not drained; the next pass asks again
            waits[node] = f"it does not answer ({type(error).__name__})"
            continue
        if not readiness.safe:
            waits[node] = (
                f"{readiness.segments_awaiting_upload} segments waiting for the tier, "
                f"{readiness.unflushed_messages} unflushed messages"
            )
    return waits


async def _apply_partition_state_access(
    kube: Kube, cluster: ClusterSpec, owner: Owner, brokers: int
) -> None:
    """The brokers' ServiceAccount (unless the spec names one) and their Role on the
    partition-state store for ``brokers`` brokers, bound to it; the Secret of users'
    SCRAM credentials, which the Role grants by name only."""
    account = broker_service_account(cluster, owner)
    if account is not None:
        await kube.apply(account)
    await kube.apply(scram_credentials_secret(cluster))
    await kube.apply(partition_state_role(cluster, owner, brokers))
    await kube.apply(partition_state_role_binding(cluster, owner))


async def _apply_all(
    kube: Kube, cluster: ClusterSpec, owner: Owner, scale: ScalePlan, operator: OperatorPeer
) -> list[Event]:
    events = []
    for manifest in (
        config_map(cluster, owner, scale.assignment),
        headless_service(cluster, owner),
        client_service(cluster, owner),
        stateful_set(cluster, owner, scale.replicas),
        pod_disruption_budget(cluster, owner),
    ):
        await kube.apply(manifest)
    policy = network_policy(cluster, owner, operator)
    if cluster.network_policy:
        await kube.apply(policy)
    else:
        await kube.delete(policy)
    if await kube.crd_exists(SERVICE_MONITOR_CRD):
        monitor = service_monitor(cluster, owner)
        if cluster.service_monitor:
            await kube.apply(monitor)
        else:
            await kube.delete(monitor)
    elif cluster.service_monitor:
        events.append(
            Event(
                True,
                "ServiceMonitorUnavailable",
                f"metrics.serviceMonitor.enabled, but the {SERVICE_MONITOR_CRD} CRD is not "
                "installed (the Prometheus Operator's); nothing is created",
                state_of=SERVICE_MONITOR_CRD,
            )
        )
    return events


async def _push_assignment(
    assignment: Assignment, pods: Mapping[int, BrokerPod], security: BrokerSecurity
) -> bool:
    """Hand the plan just written to the ConfigMap to every ready broker, all at once; a
    broker that does not take it is logged, never fatal (the next pass tries again).
    Whether every ready broker took it."""
    document = assignment.to_json()

    async def push(pod: BrokerPod) -> AssignmentUpdate:
        pod_security = await security.for_pod(pod)
        return await brokers.update_assignment(pod.address, document, security=pod_security)

    targets = [pod for pod in pods.values() if pod.ready and pod.address and not pod.deleting]
    answers = await asyncio.gather(*(push(pod) for pod in targets), return_exceptions=True)
    taken = True
    for pod, answer in zip(targets, answers, strict=True):
        if isinstance(answer, Exception):
            log.warning(
                "%s did not take the partition assignment of generation %d (it reads the "
                "file later): %s: %s",
                pod.name,
                assignment.generation,
                type(answer).__name__,
                answer,
            )
            taken = False
        elif isinstance(answer, BaseException):
            raise answer  # cancelled: the pass ends
        elif answer.generation > assignment.generation:
            log.warning(
                "%s follows a newer partition assignment (generation %d) than the ConfigMap's (%d)",
                pod.name,
                answer.generation,
                assignment.generation,
            )
    return taken


def _deferred(roll: Roll, waiting: str, cause: str) -> tuple[Roll, list[Event]]:
    """The roll waiting instead of restarting; its Event stands for this broker and
    ``cause`` (a broker that answers again but is not safe yet is a new state)."""
    name = roll.restart.name if roll.restart else ""
    event = Event(cause != _UNSAFE, "RestartDeferred", waiting, state_of=f"{name}: {cause}")
    return replace(roll, restart=None, waiting=waiting), [event]


async def _gate_restart(
    roll: Roll, desired_hash: str, security: BrokerSecurity
) -> tuple[Roll, list[Event]]:
    """The roll with its restart kept only if the broker's sidecar says it is safe now
    (flushed, nothing waiting for the tier); otherwise it says what it waits for. A
    sidecar that does not answer defers the restart: the next pass asks again."""
    pod = roll.restart
    if pod is None:
        return roll, []
    if pod.image_pull_failed:  # its sidecar never ran: nothing to flush, nobody to ask
        replacing = Event(
            False,
            "RestartingBroker",
            f"replacing {pod.name} (broker {pod.broker_id}), which cannot pull its image, "
            f"with the new configuration: {pod.config_hash or 'unknown'} -> {desired_hash}",
        )
        return roll, [replacing]
    if not pod.address:
        waiting = f"{pod.name} has no address to ask whether it is safe to restart"
        return _deferred(roll, waiting, "no address")
    try:
        readiness = await brokers.prepare_restart(pod.address, security=await security.for_pod(pod))
    except Exception as error:  # unreachable, timed out, no Secret: not known to be safe
        waiting = (
            f"{pod.name} does not answer whether it is safe to restart "
            f"({type(error).__name__}: {error})"
        )
        return _deferred(roll, waiting[:_MESSAGE_CHARS], "no answer")
    if not readiness.safe:
        waiting = (
            f"{pod.name} is not safe to restart yet: {readiness.unflushed_messages} "
            f"unflushed messages, {readiness.segments_awaiting_upload} segments waiting "
            "for the tier"
        )
        return _deferred(roll, waiting, _UNSAFE)
    restarting = Event(
        False,
        "RestartingBroker",
        f"restarting {pod.name} (broker {pod.broker_id}) for a configuration change: "
        f"{pod.config_hash or 'unknown'} -> {desired_hash}; flushed and safe",
    )
    return roll, [restarting]


async def reconcile_cluster(
    kube: Kube,
    body: Mapping[str, Any],
    delete_pod: Callable[[str], Awaitable[None]],
    config: OperatorConfig,
) -> Pass:
    """One pass; ``delete_pod(name)`` restarts a broker (the StatefulSet recreates it)."""
    if is_paused(body):
        return Pass(paused_status(body))
    cluster = ClusterSpec.from_resource(body, config.broker_image)
    owner = Owner(cluster.name, body["metadata"]["uid"])
    topic_specs = await _topics_of(kube, cluster)
    topics = {topic.name: topic.partitions for topic in topic_specs}
    untiered = [topic.name for topic in topic_specs if not topic.tiered]
    previous = await _previous_assignment(kube, cluster)
    current = await kube.stateful_set_replicas(cluster.namespace, cluster.name)
    listed = await kube.pods(cluster.namespace, selector_labels(cluster))
    found = [broker_pod(pod) for pod in listed]
    pods = {pod.broker_id: pod for pod in found if pod is not None}
    pull_failures = [failure for pod in listed for failure in image_pull.of_pod(pod)]
    width = max(cluster.brokers, current or 0)
    addresses = {node: broker_address(cluster, node) for node in range(width)}
    security = BrokerSecurity(kube, cluster)
    states: dict[TopicPartition, PartitionState] = {}
    if cluster.replication is None:
        waits = await _drain_waits(cluster, current, pods, sorted(topics), security)
        scale = plan_scale(
            cluster.brokers,
            current,
            addresses,
            topics,
            previous,
            has_tier=cluster.tier is not None,
            untiered=untiered,
            drained=set(range(cluster.brokers, current or 0)) - set(waits),
        )
    else:  # nothing drains: the data is on the replicas, which move first
        waits = {}
        states = await _partition_states(cluster)
        racks = await _broker_racks(kube, listed, previous)
        scale = plan_replicated_scale(
            cluster.brokers, current, addresses, topics, previous, states, racks
        )
    if cluster.replication is not None:  # replicas are placed across the brokers' zones
        listed_brokers = scale.assignment.brokers
        placed = {node: rack for node, rack in racks.items() if node in listed_brokers}
        scale = replace(scale, assignment=replace(scale.assignment, racks=placed))
    # every broker tells Kafka clients where the others are
    kafka = {node: broker_kafka_address(cluster, node) for node in scale.assignment.brokers}
    scale = replace(scale, assignment=replace(scale.assignment, kafka_brokers=kafka))
    scale = replace(scale, assignment=stamped(scale.assignment, previous, _now_ms()))
    if cluster.replication is not None:  # before the pods that use them
        await _apply_partition_state_access(kube, cluster, owner, width)
    events = await _apply_all(kube, cluster, owner, scale, config.peer)
    events += await _start_reassignments(cluster, scale, width)
    pushed = await _push_assignment(scale.assignment, pods, security)
    events += _scale_events(scale, previous, current, cluster.brokers)
    desired_hash = desired_config_hash(cluster)
    serving = min(cluster.brokers, scale.replicas)
    roll, restart_events = await _gate_restart(
        next_restart(list(pods.values()), desired_hash, serving), desired_hash, security
    )
    if roll.restart is not None:
        await delete_pod(roll.restart.name)
    events += restart_events + image_pull.events(pull_failures)
    status = _status(body, cluster, scale, pods, roll, desired_hash, serving, waits, pull_failures)
    if cluster.replication is not None:  # who serves each partition: its leader
        status["assignment"] = _leaders(scale.assignment, states)
    return Pass(status, events, polls_brokers=bool(scale.draining) or not roll.done or not pushed)


def _leaders(
    assignment: Assignment, states: Mapping[TopicPartition, PartitionState]
) -> dict[str, list[int]]:
    """Each topic's leader by partition, as the store says (-1: none, or not yet made)."""
    return {
        topic: [
            states[tp].leader if (tp := TopicPartition(topic, p)) in states else NO_LEADER
            for p in range(len(owners))
        ]
        for topic, owners in assignment.topics.items()
    }


def _partitions_text(partitions: list[tuple[str, int]]) -> str:
    named = [f"{topic}-{partition}" for topic, partition in partitions]
    return ", ".join(named[:10]) + (f" and {len(named) - 10} more" if len(named) > 10 else "")


def _scale_events(
    scale: ScalePlan, previous: Assignment | None, current: int | None, asked: int
) -> list[Event]:
    """An event for each step a scale-down takes (the plan changed), and its refusal."""
    events = []
    if scale.refused:
        events.append(Event(True, "ScaleDownRefused", scale.refused, state_of="brokers"))
    before = set(previous.unowned()) if previous else set()
    released = [tp for tp in scale.assignment.unowned() if tp not in before]
    if released:
        events.append(
            Event(
                False,
                "PartitionsReleased",
                f"brokers {list(scale.draining)} stopped serving {len(released)} partitions "
                f"({_partitions_text(released)}); nobody serves them until the tier holds "
                "all of their data",
            )
        )
    placed = scale.assignment.topics
    handed = sorted(
        (topic, p)
        for topic, p in before
        if p < len(placed.get(topic, ())) and placed[topic][p] != NO_OWNER
    )
    if handed:
        owners = sorted({placed[topic][p] for topic, p in handed})
        events.append(
            Event(
                False,
                "PartitionsHandedOver",
                f"{len(handed)} partitions ({_partitions_text(handed)}) are served by "
                f"brokers {owners} now",
            )
        )
    if scale.replicas != current and current is not None:
        events.append(
            Event(False, "Scaled", f"brokers {current} -> {scale.replicas} (asked: {asked})")
        )
    return events


def _drain_message(scale: ScalePlan, waits: Mapping[int, str]) -> str:
    leaving = list(scale.draining)
    if scale.phase == REASSIGNING:
        return (
            f"moving the replicas of {len(scale.moving)} partitions "
            f"({_partitions_text([(tp.topic, tp.partition) for tp in scale.moving])}) off "
            f"brokers {leaving}: each completes once its new replicas are in sync; the "
            "pods go after the last"
        )
    if scale.phase == HANDING_OVER:
        return (
            f"brokers {leaving} are drained: their partitions go to the staying brokers, "
            "then their pods go"
        )
    unowned = len(scale.assignment.unowned())
    if not waits:
        return f"brokers {leaving} own nothing and are safe: their pods go next"
    waiting = "; ".join(f"broker {node}: {why}" for node, why in sorted(waits.items()))
    return (
        f"brokers {leaving} released {unowned} partitions (unserved until handed over) and "
        f"upload what the tier lacks first; waiting for {waiting}"
    )


def _broker_states(
    cluster: ClusterSpec, scale: ScalePlan, pods: Mapping[int, BrokerPod]
) -> list[dict[str, Any]]:
    states = []
    for node in range(max(scale.replicas, cluster.brokers)):
        pod = pods.get(node)
        if pod is None:
            state = "Missing"
        elif node in scale.draining:
            state = "Draining"
        elif pod.deleting:
            state = "Restarting"
        elif pod.ready:
            state = "Running"
        else:
            state = "Pending"
        entry: dict[str, Any] = {
            "id": node,
            "pod": f"{cluster.name}-{node}",
            "address": broker_address(cluster, node),
            "ready": bool(pod and pod.ready and not pod.deleting),
            "state": state,
        }
        if pod is not None and pod.config_hash:
            entry["configHash"] = pod.config_hash
        states.append(entry)
    return states


def _status(
    body: Mapping[str, Any],
    cluster: ClusterSpec,
    scale: ScalePlan,
    pods: Mapping[int, BrokerPod],
    roll: Roll,
    desired_hash: str,
    serving: int,
    waits: Mapping[int, str],
    pull_failures: list[image_pull.PullFailure],
) -> dict[str, Any]:
    ready = [
        node
        for node in range(serving)
        if node in pods and pods[node].ready and not pods[node].deleting
    ]
    all_ready = len(ready) == serving and roll.done
    if scale.draining:
        progressing = Condition(
            PROGRESSING, True, scale.phase or DRAINING, _drain_message(scale, waits)
        )
    elif not roll.done:
        doing = f"restarting {roll.restart.name}" if roll.restart else f"waiting: {roll.waiting}"
        progressing = Condition(
            PROGRESSING,
            True,
            "RollingUpdate",
            f"brokers {list(roll.outdated)} run an older configuration; {doing}",
        )
    elif not all_ready:
        progressing = Condition(
            PROGRESSING, True, "BrokersStarting", f"{len(ready)} of {serving} brokers ready"
        )
    else:
        progressing = Condition(PROGRESSING, False, "ReconcileComplete", "nothing left to do")
    pulling = image_pull.condition(pull_failures)
    if pulling is not None:  # brokers that cannot start at all come first
        degraded = pulling
    elif scale.refused:
        degraded = Condition(DEGRADED, True, "ScaleDownRefused", scale.refused)
    else:
        degraded = Condition(DEGRADED, False, "AsExpected")
    counted = f"{len(ready)} of {serving} brokers ready and up to date"
    if all_ready:
        ready_condition = Condition(READY, True, "BrokersReady", counted)
    elif pulling is not None:
        ready_condition = Condition(READY, False, pulling.reason, f"{counted}; {pulling.message}")
    else:
        ready_condition = Condition(READY, False, progressing.reason, counted)
    paused = Condition(PAUSED, False, "Reconciling")
    selector = ",".join(f"{key}={value}" for key, value in selector_labels(cluster).items())
    return {
        "observedGeneration": body["metadata"].get("generation", 0),
        "conditions": status_conditions(body, [ready_condition, progressing, degraded, paused]),
        "replicas": len(pods),
        "readyBrokers": len(ready),
        "selector": selector,
        "configHash": desired_hash,
        "brokers": _broker_states(cluster, scale, pods),
        "assignment": {topic: list(owners) for topic, owners in scale.assignment.topics.items()},
    }
