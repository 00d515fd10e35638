"""docs/KAFKA-USERS.md shows commands a Kafka user can type: they must run.

The page's first session (its first ``sh`` block) runs here as one bash script, in an
empty directory, with the installed ``tierlog`` first on the PATH: it starts its own
three-broker cluster and stops it at its end (and this test stops it if the script
failed half-way). Every ``tierlog`` command the tables name must exist; every flag the
tools table offers, the command's parser takes and some test types; every flag it lists
as not supported, the parser refuses.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import kafka

import tierlog.client
from tierlog.cli.main import build_parser

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


def _tool_rows() -> list[tuple[str, str]]:
    """The tools table's rows a tierlog command answers: (command, notes)."""
    rows = re.findall(
        r"^\| `kafka-[^|]*\| `tierlog ([a-z -]+)` \| (.*) \|$", PAGE.read_text(), re.M
    )
    assert len(rows) >= 10, "KAFKA-USERS.md lost its tools table"
    return rows


def _flags(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z.-]*[a-z])", text))


def _unsupported_flags(notes: str) -> set[str]:
    """The ``--flags`` of a row's "Not supported:" list, and of any clause before it
    that says it is "not supported" (yet)."""
    supported, _sep, unsupported = notes.partition("Not supported:")
    clauses = re.split(r"(?<=[.;])\s+", supported)
    said = " ".join(clause for clause in clauses if "not supported" in clause.lower())
    return _flags(unsupported) | _flags(said)


def _options(command: str) -> set[str]:
    """The option strings the real parser of ``tierlog COMMAND`` takes."""
    parser = build_parser()
    for word in command.split():
        # argparse keeps subcommands in a private table; main.py walks it the same way.
        subcommands = [
            action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
        ]
        if not subcommands:
            break
        parser = subcommands[0].choices[word]
    return set(parser._option_string_actions)


def test_every_flag_the_tools_table_names_is_taken_or_refused_as_it_says() -> None:
    """A flag the table offers is one the command's parser takes; a flag its "Not
    supported:" list names is one the parser refuses."""
    wrong: dict[str, dict[str, list[str]]] = {}
    for command, notes in _tool_rows():
        options = _options(command)
        missing = sorted(_supported_flags(notes) - options)
        taken = sorted(_unsupported_flags(notes) & options)
        if missing or taken:
            wrong[command] = {"named but refused": missing, "said unsupported but taken": taken}
    assert wrong == {}


def test_every_kafka_flag_the_tools_table_offers_is_exercised_by_a_test() -> None:
    """Each offered flag appears in some test's source (or in the first session, which
    ``test_the_first_session_runs_as_written`` runs)."""
    session = re.search(r"^```sh\n(.*?)^```", PAGE.read_text(), re.DOTALL | re.MULTILINE)
    assert session is not None
    sources = [session.group(1)] + [
        path.read_text()
        for path in (REPO / "tests").rglob("*.py")
        if path.resolve() != Path(__file__).resolve()
    ]
    used = set().union(*(_flags(source) for source in sources))
    unexercised = {
        command: sorted(_supported_flags(notes) - used) for command, notes in _tool_rows()
    }
    assert {command: flags for command, flags in unexercised.items() if flags} == {}


def test_the_side_by_side_table_names_calls_each_library_has() -> None:
    """Each ``producer.x(``, ``consumer.x(`` and ``admin.x(`` of the table of
    tierlog.client beside kafka-python and confluent-kafka is a call of that library's
    class (both are installed for the Kafka listener's tests)."""
    classes = (
        {"producer": tierlog.client.Producer, "consumer": tierlog.client.Consumer,
         "admin": tierlog.client.AdminClient},
        {"producer": kafka.KafkaProducer, "consumer": kafka.KafkaConsumer,
         "admin": kafka.KafkaAdminClient},
        {"producer": confluent_kafka.Producer, "consumer": confluent_kafka.Consumer,
         "admin": confluent_kafka.admin.AdminClient},
    )  # fmt: skip
    section = PAGE.read_text().split("## tierlog.client beside kafka-python and confluent-kafka")
    assert len(section) == 2, "KAFKA-USERS.md lost its side-by-side table"
    rows = re.findall(r"^\| ([^|`][^|]*) \| (.*) \|$", section[1].split("\n## ")[0], re.M)
    assert len(rows) >= 20
    missing = []
    for task, cells in rows:
        for library, cell in zip(classes, cells.split(" | "), strict=True):
            for role, call in re.findall(r"\b(producer|consumer|admin)\.(\w+)\(", cell):
                if not hasattr(library[role], call):
                    missing.append(f"{task}: {library[role].__name__}.{call}")
    assert missing == []
