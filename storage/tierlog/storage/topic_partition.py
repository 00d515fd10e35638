"""``TopicPartition``: the name of one partition, the key of nearly everything.

Its own module at the bottom of the package, so that every layer (storage, the broker,
the client, the pipeline) names a partition with the same value type.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["TopicPartition"]


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    @property
    def dir_name(self) -> str:
        """The partition's directory in a log dir, Kafka's ``<topic>-<partition>``."""
        return f"{self.topic}-{self.partition}"

    def __str__(self) -> str:
        return self.dir_name
