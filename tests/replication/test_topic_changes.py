"""Topic changes of a replicated cluster, written to a real (file-lock) partition-state store."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.broker.topics import TopicStore
from tierlog.partition_state.local_store import LocalStateStore
from tierlog.replication.topic_changes import create_topic
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import InvalidTopicError

RACKS = {0: None, 1: None, 2: None}


@pytest.mark.parametrize("validate_only", [False, True])
def test_a_name_colliding_on_dot_and_underscore_with_a_stored_topic_is_refused(
    tmp_path: Path, validate_only: bool
) -> None:
    """Checked against the store, which is the cluster's truth: the creating broker may
    not have learned of the other topic yet (its own topic list is empty here)."""
    store = LocalStateStore(tmp_path / "store")
    create_topic(
        store, TopicStore([tmp_path / "a"], LogConfig()), RACKS, "billing.events", 3, 3, {}
    )
    unaware = TopicStore([tmp_path / "b"], LogConfig())
    with pytest.raises(InvalidTopicError, match=r"collides with existing topic 'billing\.events'"):
        create_topic(store, unaware, RACKS, "billing_events", 3, 3, {}, validate_only=validate_only)
    assert store.list_topics() == ["billing.events"]
