"""Partition-labelled gauges: one series a partition up to the limit, summed per topic above."""

from __future__ import annotations

import pytest

from tierlog.broker.partition_series import PARTITION_SERIES_KEY, PartitionSeries, series_limit
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.topic_partition import TopicPartition

SAMPLES = [
    (("billing",), TopicPartition("orders", 0), 5.0),
    (("billing",), TopicPartition("orders", 1), 7.0),
    (("audit",), TopicPartition("orders", 0), 2.0),
    (("billing",), TopicPartition("refunds", 0), 1.0),
]


def _series(series: PartitionSeries) -> dict[tuple[str, ...], float]:
    family = series.gauge("tierlog_x", "x", ["consumergroup"], SAMPLES)
    return {tuple(sample.labels.values()): sample.value for sample in family.samples}


def test_a_broker_at_the_limit_reports_every_partition() -> None:
    series = PartitionSeries(limit=3, held=lambda: 3)
    assert _series(series) == {
        ("billing", "orders", "0"): 5,
        ("billing", "orders", "1"): 7,
        ("audit", "orders", "0"): 2,
        ("billing", "refunds", "0"): 1,
    }


def test_a_broker_above_the_limit_sums_per_topic_and_the_other_labels() -> None:
    series = PartitionSeries(limit=3, held=lambda: 4)
    family = series.gauge("tierlog_x", "x", ["consumergroup"], SAMPLES)
    assert family.samples[0].labels.keys() == {"consumergroup", "topic"}
    assert _series(series) == {
        ("billing", "orders"): 12,
        ("audit", "orders"): 2,
        ("billing", "refunds"): 1,
    }


def test_no_limit_never_sums_and_zero_always_does() -> None:
    assert PartitionSeries(limit=-1, held=lambda: 1_000_000).per_partition()
    assert not PartitionSeries(limit=0, held=lambda: 1).per_partition()


@pytest.mark.parametrize(("value", "limit"), [(None, -1), ("-1", -1), ("0", 0), ("4000", 4000)])
def test_the_limit_comes_from_the_broker_config(value: str | None, limit: int) -> None:
    props = {} if value is None else {PARTITION_SERIES_KEY: value}
    assert series_limit(props) == limit


@pytest.mark.parametrize("value", ["-2", "many", ""])
def test_a_bad_limit_is_a_typed_config_error(value: str) -> None:
    with pytest.raises(InvalidConfigError, match=PARTITION_SERIES_KEY):
        series_limit({PARTITION_SERIES_KEY: value})


def test_an_age_above_the_limit_is_the_topics_largest_not_a_sum() -> None:
    series = PartitionSeries(limit=0, held=lambda: 4)
    family = series.gauge("tierlog_age", "age", ["consumergroup"], SAMPLES, largest=True)
    ages = {tuple(sample.labels.values()): sample.value for sample in family.samples}
    assert ages == {("billing", "orders"): 7, ("audit", "orders"): 2, ("billing", "refunds"): 1}
