"""What a broker must change to hold a topic as its TierlogTopic says (pure).

Each broker keeps its own topic store, so the operator compares the spec with every
broker's view and sends each only the difference: create the topic, add partitions,
set and remove config overrides. Fewer partitions than a broker has is not a change a
broker can make (Kafka cannot remove partitions): that is reported, not attempted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tierlog.operator.spec import TopicSpec

__all__ = ["BrokerTopic", "TopicChanges", "changes"]


@dataclass(frozen=True)
class BrokerTopic:
    partitions: int | None  # None: the broker does not have the topic
    overrides: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicChanges:
    create: bool = False
    grow_to: int | None = None
    set_configs: Mapping[str, str] = field(default_factory=dict)
    delete_configs: tuple[str, ...] = ()
    impossible: str = ""

    @property
    def none(self) -> bool:
        return not (self.create or self.grow_to or self.set_configs or self.delete_configs)


def changes(desired: TopicSpec, actual: BrokerTopic) -> TopicChanges:
    if actual.partitions is None:
        return TopicChanges(create=True)
    if actual.partitions > desired.partitions:
        return TopicChanges(
            impossible=f"the topic has {actual.partitions} partitions on a broker, more than "
            f"the {desired.partitions} asked for; partitions cannot be removed"
        )
    return TopicChanges(
        grow_to=desired.partitions if desired.partitions > actual.partitions else None,
        set_configs={
            key: value
            for key, value in sorted(desired.configs.items())
            if actual.overrides.get(key) != value
        },
        delete_configs=tuple(sorted(set(actual.overrides) - set(desired.configs))),
    )
