"""Conditions keep the time of their last change, and say which generation they describe."""

from __future__ import annotations

from tierlog.operator.conditions import READY, Condition, merge


def test_a_new_condition_is_stamped_now() -> None:
    (ready,) = merge([], [Condition(READY, False, "BrokersStarting", "0 of 3")], 4, "T1")
    assert ready == {
        "type": "Ready",
        "status": "False",
        "reason": "BrokersStarting",
        "message": "0 of 3",
        "lastTransitionTime": "T1",
        "observedGeneration": 4,
    }


def test_the_transition_time_moves_only_when_the_status_does() -> None:
    first = merge([], [Condition(READY, False, "BrokersStarting")], 1, "T1")
    same = merge(first, [Condition(READY, False, "RollingUpdate")], 2, "T2")
    assert same[0]["lastTransitionTime"] == "T1"
    assert (same[0]["reason"], same[0]["observedGeneration"]) == ("RollingUpdate", 2)
    flipped = merge(same, [Condition(READY, True, "BrokersReady")], 2, "T3")
    assert flipped[0]["lastTransitionTime"] == "T3"


def test_other_conditions_are_kept() -> None:
    both = merge([], [Condition("A", True, "x"), Condition("B", True, "y")], 1, "T1")
    later = merge(both, [Condition("B", False, "z")], 1, "T2")
    assert [(c["type"], c["status"]) for c in later] == [("A", "True"), ("B", "False")]
