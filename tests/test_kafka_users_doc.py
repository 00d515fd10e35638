"""docs/KAFKA-USERS.md shows commands a Kafka user can type: they must run.

The page's first session (its first ``sh`` block) runs here as one bash script, in an
empty directory, with the installed ``tierlog`` first on the PATH: it starts its own
three-broker cluster and stops it at its end (and this test stops it if the script
failed half-way). Every ``tierlog`` command the tables name must exist.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "KAFKA-USERS.md"
BIN = Path(sys.executable).parent


def _tierlog_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERLOG_")}
    return env | {"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"}


def test_the_first_session_runs_as_written(tmp_path: Path) -> None:
    session = re.search(r"^```sh\n(.*?)^```", PAGE.read_text(), re.DOTALL | re.MULTILINE)
    assert session is not None, "KAFKA-USERS.md lost its first session"
    script = tmp_path / "session.sh"
    script.write_text("set -euo pipefail\n" + session.group(1))
    try:
        ran = subprocess.run(
            ["bash", str(script)],
            cwd=tmp_path,
            env=_tierlog_env(),
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}"
        assert "Created topic orders." in ran.stdout
    finally:
        subprocess.run(
            [str(BIN / "tierlog"), "cluster", "down", "--dir", str(tmp_path / "dev")],
            env=_tierlog_env(),
            capture_output=True,
            timeout=120,
        )


def test_every_tierlog_command_the_tables_name_exists() -> None:
    named = set(re.findall(r"`tierlog ([a-z-]+)", PAGE.read_text()))
    assert {"topics", "produce", "consume", "consumer-groups", "configs"} <= named
    for command in sorted(named):
        helped = subprocess.run(
            [str(BIN / "tierlog"), command, "--help"],
            env=_tierlog_env(),
            capture_output=True,
            timeout=60,
        )
        assert helped.returncode == 0, f"tierlog {command}: {helped.stderr.decode()}"


def _supported_flags(notes: str) -> set[str]:
    """The ``--flags`` a row's notes name as supported: all before its "Not supported:"
    list, but a clause that says it is "not supported" (yet)."""
    clauses = re.split(r"(?<=[.;])\s+", notes.split("Not supported:")[0])
    kept = " ".join(clause for clause in clauses if "not supported" not in clause.lower())
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z.-]*[a-z])", kept))


def _help(command: list[str]) -> str:
    helped = subprocess.run(
        [str(BIN / "tierlog"), *command, "--help"],
        env=_tierlog_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert helped.returncode == 0, f"tierlog {' '.join(command)}: {helped.stderr}"
    return helped.stdout


def test_every_flag_the_tools_table_names_as_supported_is_accepted() -> None:
    rows = re.findall(
        r"^\| `kafka-[^|]*\| `tierlog ([a-z -]+)` \| (.*) \|$", PAGE.read_text(), re.M
    )
    assert len(rows) >= 10, "KAFKA-USERS.md lost its tools table"
    missing = {}
    for command, notes in rows:
        offered = _help(command.split())
        absent = sorted(flag for flag in _supported_flags(notes) if flag not in offered)
        if absent:
            missing[command] = absent
    assert missing == {}
