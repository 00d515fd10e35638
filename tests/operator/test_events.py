"""A lasting state's Event is posted when the state begins, not on every pass."""

from __future__ import annotations

from tierlog.operator.events import Event, Standing, to_post

DEFERRED = Event(False, "RestartDeferred", "demo-1 is not safe to restart yet", "demo-1")
RESTARTING = Event(False, "RestartingBroker", "restarting demo-1")


def passes(*events_of_each: list[Event]) -> list[list[str]]:
    """The reasons posted by a run of passes, one list a pass."""
    standing: Standing = frozenset()
    posted = []
    for events in events_of_each:
        fresh, standing = to_post(events, standing)
        posted.append([event.reason for event in fresh])
    return posted


def test_a_lasting_state_is_posted_once_while_it_lasts() -> None:
    changed = Event(False, "RestartDeferred", "demo-1: 3 segments waiting", "demo-1")
    assert passes([DEFERRED], [DEFERRED], [changed], [RESTARTING]) == [
        ["RestartDeferred"],
        [],
        [],
        ["RestartingBroker"],
    ]


def test_a_state_that_ended_is_posted_again_when_it_returns() -> None:
    assert passes([DEFERRED], [], [DEFERRED]) == [["RestartDeferred"], [], ["RestartDeferred"]]


def test_the_same_reason_about_another_object_is_a_new_state() -> None:
    other = Event(False, "RestartDeferred", "demo-0 is not safe to restart yet", "demo-0")
    assert passes([DEFERRED], [other]) == [["RestartDeferred"], ["RestartDeferred"]]


def test_single_steps_are_always_posted() -> None:
    assert passes([RESTARTING], [RESTARTING]) == [["RestartingBroker"], ["RestartingBroker"]]
