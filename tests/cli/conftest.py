"""Fixtures for the CLI tests (the helpers live in ``segments``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .segments import WrittenLog, write_log


@pytest.fixture
def written_log(tmp_path: Path) -> WrittenLog:
    """A closed partition that tierlog wrote: several segments, every codec."""
    return write_log(tmp_path / "topic-0")
