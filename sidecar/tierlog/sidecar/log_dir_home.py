"""Which log dir holds a directory the broker keeps in just one of them.

By default the remote tier is the directory ``tier`` in a log dir and the remote-read
cache is ``tier-cache``. Which log dir must not depend on the order of ``--data-dir``
(as the topic store's copies do not): with a new disk listed first, a tier in the
second would be left unseen, reads below the local log start would fail and the
uploader would start a second, empty tier. So the home is the log dir whose directory
of that name already holds files; the first log dir only when none does (an empty
directory, such as the object store's ``.incoming/`` alone, holds nothing to lose).
Two that hold files stop the start with both named: either may hold the only copy of
offloaded segments, and no rule could pick the right one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tierlog.storage.errors import InvalidConfigError

__all__ = ["home_log_dir"]


def home_log_dir(log_dirs: Sequence[Path], name: str, setting: str) -> Path:
    """The log dir whose ``name`` directory holds files, else the first log dir.

    ``setting`` is the config key that names the directory outright; the error for two
    homes suggests it.
    """
    homes = [log_dir for log_dir in log_dirs if _holds_files(log_dir / name)]
    if len(homes) > 1:
        raise InvalidConfigError(
            f"{homes[0] / name} and {homes[1] / name} both hold files and {setting} is not "
            "set, so either could be the one in use; keep the right one, move the other out "
            f"of its log dir (or set {setting}) and start again"
        )
    return homes[0] if homes else log_dirs[0]


def _holds_files(directory: Path) -> bool:
    """Whether any file lies under ``directory`` (stops at the first one found)."""
    return any(path.is_file() for path in directory.rglob("*"))
