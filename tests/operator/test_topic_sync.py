"""What each broker is asked to change for a TierlogTopic."""

from __future__ import annotations

from tierlog.operator.spec import TopicSpec
from tierlog.operator.topic_sync import BrokerTopic, changes

WANTED = TopicSpec("orders", "demo", 4, {"retention.ms": "1000", "cleanup.policy": "compact"})


def test_a_missing_topic_is_created() -> None:
    assert changes(WANTED, BrokerTopic(None)).create


def test_partitions_grow_and_overrides_are_set_and_removed() -> None:
    change = changes(WANTED, BrokerTopic(2, {"retention.ms": "5", "segment.bytes": "100"}))
    assert change.grow_to == 4
    assert change.set_configs == {"cleanup.policy": "compact", "retention.ms": "1000"}
    assert change.delete_configs == ("segment.bytes",)


def test_a_broker_that_agrees_needs_nothing() -> None:
    assert changes(WANTED, BrokerTopic(4, dict(WANTED.configs))).none


def test_fewer_partitions_than_a_broker_has_cannot_be_applied() -> None:
    change = changes(WANTED, BrokerTopic(6))
    assert "cannot be removed" in change.impossible and change.none


def test_the_spec_reads_kafka_values_and_the_topic_name() -> None:
    topic = TopicSpec.from_resource(
        {
            "metadata": {"name": "orders-object"},
            "spec": {
                "cluster": "demo",
                "topicName": "Orders_v2",
                "partitions": 3,
                "config": {"preallocate": True, "retention.ms": 60000},
            },
        }
    )
    assert topic.name == "Orders_v2"
    assert topic.configs == {"preallocate": "true", "retention.ms": "60000"}
