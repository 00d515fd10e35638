"""docs/ARCHITECTURE.md's diagram and layer table name every package, and only those.

The diagram is the Mermaid block on the page; a package added under any top-level
folder that the diagram does not name, or a node left for a package that is gone, fails
here. The layers themselves are checked by ``make lint`` (import-linter's contracts in
pyproject.toml); this keeps the picture and the table in step with them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "ARCHITECTURE.md"
SOURCE_FOLDERS = ("storage", "sidecar", "pipeline", "operator")


def _packages() -> set[str]:
    """Every ``tierlog.X`` package (a directory with Python modules) in the source tree."""
    found = set()
    for folder in SOURCE_FOLDERS:
        for child in (REPO / folder / "tierlog").iterdir():
            if child.is_dir() and any(child.glob("*.py")):
                found.add(f"tierlog.{child.name}")
    return found


def _diagram() -> str:
    block = re.search(r"^```mermaid\n(.*?)^```", PAGE.read_text(), re.DOTALL | re.MULTILINE)
    assert block is not None, "ARCHITECTURE.md lost its mermaid diagram"
    return block.group(1)


def _layers() -> list[set[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layered,) = [contract for contract in contracts if contract["type"] == "layers"]
    return [{name.strip() for name in layer.split("|")} for layer in layered["layers"]]


def test_the_diagram_names_every_package_and_no_other() -> None:
    named = set(re.findall(r"\[\"(tierlog\.[a-z_]+)", _diagram()))
    assert named == _packages()


def test_every_diagram_arrow_points_down_the_layers() -> None:
    rank = {name: depth for depth, layer in enumerate(_layers()) for name in layer}
    arrows = re.findall(r"^\s*([a-z_]+) --> ([a-z_]+)$", _diagram(), re.MULTILINE)
    assert arrows, "the diagram has no arrows"
    upward = [(a, b) for a, b in arrows if rank[f"tierlog.{a}"] >= rank[f"tierlog.{b}"]]
    assert upward == []


def test_the_layers_contract_places_every_package_with_broker_code() -> None:
    layered = set().union(*_layers())
    # The two root modules (file_lock, process_tuning) import nothing of tierlog.
    assert layered == _packages()
