"""docs/RELIABILITY.md names a test for every promise: each named test must exist.

A promise whose test was renamed or removed would go on being read as proved; this
keeps the page and the suite in step.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RELIABILITY = REPO / "docs" / "RELIABILITY.md"
# A pytest node id as the page writes it: `tests/x/test_y.py::test_name` (a parameter
# id in brackets may follow; it is not part of the function's name).
NODE_ID = re.compile(r"`(tests/[\w/]+\.py)::(\w+)(?:\[[^\]`]*\])?`")


@cache
def _test_functions(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text())
    return frozenset(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    )


def test_every_test_the_page_names_exists() -> None:
    named = NODE_ID.findall(RELIABILITY.read_text())
    assert len(named) > 20, "the page names its tests as `tests/...py::test_name`"
    missing = [
        f"{path}::{name}"
        for path, name in named
        if not (REPO / path).is_file() or name not in _test_functions(REPO / path)
    ]
    assert missing == []


def test_every_promise_row_names_a_test() -> None:
    rows = [
        line
        for line in RELIABILITY.read_text().splitlines()
        if line.startswith("| ") and not line.startswith("| tierlog promises")
    ]
    assert rows, "the page keeps its promises in tables"
    assert [row for row in rows if not NODE_ID.search(row)] == []
