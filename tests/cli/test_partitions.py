"""``tierlog partitions reassign``: Kafka's reassignment JSON executed on a directory store
and verified; the controller (a real one, over the same store) completes the move once
the new replica is in sync; bad plans are refused by name and change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tierlog.cli.main import main
from tierlog.controller.controller import Controller
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.partition_state.model import PartitionState


@pytest.fixture
def store(tmp_path: Path) -> LocalStateStore:
    store = LocalStateStore(tmp_path / "state")
    store.create_topic(
        "orders", {0: PartitionState.new((0, 1, 2)), 1: PartitionState.new((1, 2, 0))}
    )
    for broker in range(4):
        store.acquire_lease(broker, f"broker-{broker}", 30.0)
    return store


def _plan(tmp_path: Path, *entries: tuple[str, int, list[int]]) -> Path:
    path = tmp_path / "plan.json"
    partitions = [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries]
    path.write_text(json.dumps({"version": 1, "partitions": partitions}))
    return path


def _reassign(plan: Path, action: str, state_dir: Path) -> int:
    return main(
        ["partitions", "reassign", "--plan", str(plan), action, "--state-dir", str(state_dir)]
    )


def test_execute_prints_the_way_back_and_verify_follows_the_move_to_its_end(
    store: LocalStateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, ("orders", 0, [1, 2, 3]))
    assert _reassign(plan, "--execute", tmp_path / "state") == 0
    printed = capsys.readouterr().out.splitlines()
    assert json.loads(printed[-1]) == {
        "version": 1,
        "partitions": [{"topic": "orders", "partition": 0, "replicas": [0, 1, 2]}],
    }
    moving = store.read_topic("orders")[0]
    assert (moving.replicas, moving.adding_replicas, moving.removing_replicas) == (
        (1, 2, 3, 0),
        (3,),
        (0,),
    )
    assert _reassign(plan, "--verify", tmp_path / "state") == 1
    assert "Reassignment of partition orders-0: in progress" in capsys.readouterr().out

    controller = Controller(store, preferred_leaders=False)  # the move elects, not it
    controller.step()
    assert store.read_topic("orders")[0].reassigning  # broker 3 not in sync yet
    store.alter_partition("orders", 0, moving.partition_epoch, moving.with_isr((0, 1, 2, 3)))
    controller.step()  # the leader added it to the ISR: the controller completes

    assert _reassign(plan, "--verify", tmp_path / "state") == 0
    assert "Reassignment of partition orders-0: completed" in capsys.readouterr().out
    done = store.read_topic("orders")[0]
    assert (done.replicas, done.isr, done.leader) == ((1, 2, 3), (1, 2, 3), 1)
    assert controller.elections["reassignment"] == 1


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ((("orders", 0, [1, 7]),), "brokers [7] do not exist"),
        ((("orders", 0, [1, 1]),), "each a distinct broker id"),
        ((("orders", 0, [1]), ("orders", 0, [2])), "listed twice"),
        ((("orders", 9, [1]),), "UNKNOWN_TOPIC_OR_PARTITION"),
    ],
)
def test_a_plan_that_cannot_be_is_refused_by_name_and_nothing_moves(
    store: LocalStateStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    entries: tuple[tuple[str, int, list[int]], ...],
    message: str,
) -> None:
    before = store.read_topic("orders")
    # A good entry first: nothing of a plan starts unless all of it can.
    plan = _plan(tmp_path, ("orders", 1, [3, 2, 0]), *entries)
    assert _reassign(plan, "--execute", tmp_path / "state") == 1
    error = capsys.readouterr().err
    assert "tierlog partitions:" in error
    assert message in error
    assert store.read_topic("orders") == before


def test_a_file_that_is_not_a_plan_is_refused(
    tmp_path: Path, store: LocalStateStore, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"version": 2, "partitions": []}')
    assert _reassign(plan, "--verify", tmp_path / "state") == 1
    assert "INVALID_REPLICA_ASSIGNMENT: not a reassignment plan" in capsys.readouterr().err
