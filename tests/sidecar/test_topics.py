"""The broker's topic store on disk: a file it cannot read is a typed error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.sidecar.topics import TOPICS_FILE, TopicStore
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import InvalidConfigError


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "null",
        '"topics"',
        "42",
        '{"version": 1, "topics": []}',
        '{"version": 1}',
        '{"version": 1, "topics": {"t": []}}',
        '{"version": 1, "topics": {"t": {"partitions": "many", "configs": {}}}}',
        '{"version": 2, "topics": {}}',
        "{not json",
    ],
)
def test_an_unreadable_topics_file_is_invalid_config_naming_it(tmp_path: Path, text: str) -> None:
    path = tmp_path / TOPICS_FILE
    path.write_text(text)
    with pytest.raises(InvalidConfigError, match=TOPICS_FILE):
        TopicStore(path, LogConfig())
    assert path.read_text() == text  # left as found, for its owner to look at
