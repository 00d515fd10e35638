"""The rolling update restarts one outdated broker at a time, only from a healthy cluster."""

from __future__ import annotations

import dataclasses

from tierlog.operator.rolling import BrokerPod, next_restart


def pod(broker_id: int, config_hash: str, ready: bool = True, deleting: bool = False) -> BrokerPod:
    return BrokerPod(broker_id, f"c-{broker_id}", ready, config_hash, deleting, "127.0.0.1:1")


def test_nothing_to_do_when_every_broker_runs_the_desired_version() -> None:
    roll = next_restart([pod(0, "new"), pod(1, "new")], "new", 2)
    assert roll.done and roll.restart is None


def test_the_highest_outdated_broker_goes_first() -> None:
    roll = next_restart([pod(0, "old"), pod(1, "old"), pod(2, "new")], "new", 3)
    assert roll.restart is not None and roll.restart.broker_id == 1
    assert roll.outdated == (0, 1)


def test_nothing_restarts_while_a_broker_is_away() -> None:
    missing = next_restart([pod(0, "old"), pod(2, "new")], "new", 3)
    assert missing.restart is None and "broker 1 has no pod" in missing.waiting
    starting = next_restart([pod(0, "old"), pod(1, "new", ready=False)], "new", 2)
    assert starting.restart is None and "broker 1 is not ready" in starting.waiting
    going = next_restart([pod(0, "old"), pod(1, "new", deleting=True)], "new", 2)
    assert going.restart is None and not going.done


def test_pods_beyond_the_brokers_are_not_rolled() -> None:
    roll = next_restart([pod(0, "new"), pod(1, "old")], "new", 1)
    assert roll.done


def test_a_pod_that_cannot_pull_its_image_is_replaced_at_once_by_the_new_version() -> None:
    """Its sidecar never ran, and it is never ready: waiting for it would hold the roll
    that brings the fixed image forever."""
    unpulled = dataclasses.replace(pod(1, "old", ready=False), image_pull_failed=True)
    roll = next_restart([pod(0, "old", ready=False), unpulled, pod(2, "old")], "new", 3)
    assert roll.restart == unpulled
    current = dataclasses.replace(pod(1, "new", ready=False), image_pull_failed=True)
    stuck = next_restart([pod(0, "old"), current], "new", 2)  # nothing newer to bring it
    assert stuck.restart is None and "broker 1 is not ready" in stuck.waiting
