"""Every topic's name by its id, as Fetch v13+, Metadata and DeleteTopics look topics up.

A topic's id is derived from the cluster id and its name (a hash per topic), so the map
is built anew only when the topic store's ``version`` moves, not for every request: a
consumer fetching by id asks many times a second, a broker may hold thousands of topics,
and topics change rarely. Handlers run on the event loop, one at a time, so the cache
needs no lock; a change made on another thread is seen by the next request (the store
hands its topics and their version over together).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from types import MappingProxyType

from tierlog.broker.topics import TopicStore

__all__ = ["TopicNames"]


class TopicNames:
    def __init__(self) -> None:
        self._built: tuple[int, Mapping[uuid.UUID, str]] | None = None

    def by_id(
        self, store: TopicStore, topic_id: Callable[[str], uuid.UUID]
    ) -> Mapping[uuid.UUID, str]:
        """The names of ``store``'s topics by ``topic_id``: the last map built while the
        store's version has not moved since (read-only: every caller shares it)."""
        if self._built is None or self._built[0] != store.version:
            version, topics = store.versioned_topics()
            names = {topic_id(topic.name): topic.name for topic in topics}
            self._built = (version, MappingProxyType(names))
        return self._built[1]
