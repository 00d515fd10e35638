"""The Python examples in docs/API.md type-check under ``mypy --strict`` as a user's
code would: against the installed package, which ships ``py.typed`` markers.

Each example is its own module, run from an empty directory (none of this repository's
mypy settings apply), so an example that stops matching the API, or an API that loses
its annotations, fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
API_DOC = REPO / "docs" / "API.md"
EXAMPLE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_the_api_docs_examples_pass_mypy_strict(tmp_path: Path) -> None:
    examples = EXAMPLE.findall(API_DOC.read_text())
    assert len(examples) >= 2, "docs/API.md lost its Python examples"
    files = []
    for number, code in enumerate(examples):
        path = tmp_path / f"api_example_{number}.py"
        path.write_text(code)
        files.append(str(path))
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *files],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_api_docs_list_every_proto_file() -> None:
    """The page's opening list of ``.proto`` files is the directory's, file for file."""
    opening = API_DOC.read_text().split("\n\n", 2)[1]
    listed = set(re.findall(r"`([a-z_]+\.proto)`", opening))
    on_disk = {path.name for path in (REPO / "proto" / "tierlog" / "v1").glob("*.proto")}
    assert listed == on_disk
