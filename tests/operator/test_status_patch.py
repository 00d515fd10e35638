"""A pass's status is written whole for each key it writes; the keys it leaves out stay."""

from __future__ import annotations

from tierlog.operator.status_patch import changes_status, status_patch


def test_keys_gone_inside_a_written_key_are_deleted() -> None:
    before = {
        "config": {"retention.ms": "60000", "segment.bytes": "1024"},
        "assignment": {"orders": [0, 1], "audit": [1]},
        "topicName": "orders",
    }
    after = {"config": {"segment.bytes": "2048"}, "assignment": {"orders": [1, 0]}}
    assert status_patch(before, after) == {
        "config": {"retention.ms": None, "segment.bytes": "2048"},
        "assignment": {"audit": None, "orders": [1, 0]},
    }


def test_nested_maps_are_replaced_at_every_depth_and_lists_whole() -> None:
    before = {"a": {"b": {"c": 1, "d": 2}, "e": [1, 2]}}
    after = {"a": {"b": {"c": 1}, "e": [3]}}
    assert status_patch(before, after) == {"a": {"b": {"c": 1, "d": None}, "e": [3]}}


def test_a_first_status_and_a_value_that_was_no_map() -> None:
    assert status_patch(None, {"config": {"x": "1"}}) == {"config": {"x": "1"}}
    assert status_patch({"config": "odd"}, {"config": {"x": "1"}}) == {"config": {"x": "1"}}


def test_a_status_the_object_already_holds_changes_nothing() -> None:
    held = {"topicName": "orders", "config": {"x": "1"}, "conditions": [{"type": "Ready"}]}
    assert not changes_status(held, {"config": {"x": "1"}, "topicName": "orders"})
    assert changes_status(held, {"config": {"x": "2"}})
    assert changes_status(held, {"partitions": 3})  # a key it lacks
    assert changes_status(None, {"topicName": "orders"})
