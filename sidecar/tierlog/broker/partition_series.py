"""Gauges labelled by partition, or summed per topic on a broker that holds many.

A scrape grows with the partitions a broker holds: each one has a series in every
partition-labelled family (log offsets, size and segments, upload lag, committed
offsets), about 250 bytes a partition, so a broker of 4,000 partitions answers a
megabyte at every scrape (docs/BENCHMARKS.md, "Metrics scrape"). Kafka's JMX reports
every partition; Redpanda's ``aggregate_metrics`` sums them. tierlog does either, by
``tierlog.metrics.partition.series.max``: a broker holding more partitions than that
reports those families with the ``partition`` label dropped and the values summed per
topic (and per the family's other labels), so a scrape grows with the topics instead.
-1, the default, never sums: Kafka's behaviour, and the one the lag alert needs
(docs/METRICS.md says what a summed series still tells).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from prometheus_client.core import GaugeMetricFamily

from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["PARTITION_SERIES_KEY", "PartitionSeries", "series_limit"]

PARTITION_SERIES_KEY = "tierlog.metrics.partition.series.max"


def series_limit(props: Mapping[str, str]) -> int:
    """``tierlog.metrics.partition.series.max``: -1 (no limit, the default) or a count."""
    value = props.get(PARTITION_SERIES_KEY, "-1")
    try:
        limit = int(value)
    except ValueError:
        limit = -2
    if limit < -1:
        raise InvalidConfigError(f"{PARTITION_SERIES_KEY} must be -1 or a count: {value!r}")
    return limit


# One sample: the values of the family's leading labels, the partition, the value.
Sample = tuple[Sequence[str], TopicPartition, float]


class PartitionSeries:
    """Builds a broker's partition-labelled gauge families, one series per partition
    while it holds at most ``limit`` partitions (``held()``), summed per topic above."""

    def __init__(self, limit: int = -1, held: Callable[[], int] = lambda: 0) -> None:
        self.limit = limit
        self.held = held

    def per_partition(self) -> bool:
        return self.limit < 0 or self.held() <= self.limit

    def gauge(
        self,
        name: str,
        documentation: str,
        labels: Sequence[str],
        samples: Iterable[Sample],
        *,
        largest: bool = False,
    ) -> GaugeMetricFamily:
        """``name`` labelled ``labels`` + topic + partition, or + topic alone: summed,
        or the largest where a sum means nothing (an age, a bound)."""
        if self.per_partition():
            family = GaugeMetricFamily(name, documentation, None, [*labels, "topic", "partition"])
            for values, tp, value in samples:
                family.add_metric([*values, tp.topic, str(tp.partition)], value)
            return family
        combined: dict[tuple[str, ...], float] = {}
        for values, tp, value in samples:
            key = (*values, tp.topic)
            before = combined.get(key)
            if before is None:
                combined[key] = value
            else:
                combined[key] = max(before, value) if largest else before + value
        how = "the largest" if largest else "summed"
        family = GaugeMetricFamily(
            name, f"{documentation} ({how} over the topic's partitions held here)", None,
            [*labels, "topic"],
        )  # fmt: skip
        for key, value in combined.items():
            family.add_metric(list(key), value)
        return family
