"""``tierlog demo`` end to end: what it prints must be true of the files it leaves."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tierlog.cli.demo import run_demo
from tierlog.cli.main import main
from tierlog.storage.checkpoints import CLEAN_SHUTDOWN_MARKER
from tierlog.storage.records import iter_batches

DEMO_RECORDS = 4000


def _claims(out: str) -> dict[str, int]:
    rolled = re.search(r"the log rolled (\d+) times", out)
    appended = re.search(r"Append (\d+) records", out)
    offsets = re.search(r"offsets (\d+)\.\.(\d+) assigned", out)
    reopened = re.search(
        r"demo-0 log end offset (\d+), the same as before the shutdown \((\d+)\)", out
    )
    assert rolled and appended and offsets and reopened, out
    return {
        "rolled": int(rolled[1]),
        "appended": int(appended[1]),
        "first": int(offsets[1]),
        "last": int(offsets[2]),
        "reopened_end": int(reopened[1]),
        "end_before": int(reopened[2]),
    }


def _check_files_agree(data_dir: Path, claims: dict[str, int]) -> None:
    partition = data_dir / "demo-0"
    logs = sorted(partition.glob("*.log"))
    assert len(logs) == claims["rolled"] + 1 > 1
    assert (data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    last_batch = list(iter_batches(logs[-1].read_bytes()))[-1]
    assert last_batch.last_offset + 1 == claims["reopened_end"]
    for log_path in logs:  # every closed segment's indexes are trimmed to their entries
        assert log_path.with_suffix(".index").stat().st_size % 8 == 0
        assert log_path.with_suffix(".index").stat().st_size < 10 * 1024 * 1024


def test_demo_through_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--data-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()

    claims = _claims(out)
    assert claims["appended"] == DEMO_RECORDS
    assert (claims["first"], claims["last"]) == (0, DEMO_RECORDS - 1)
    assert claims["reopened_end"] == claims["end_before"] == DEMO_RECORDS
    _check_files_agree(tmp_path, claims)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert re.search(rf"^   {codec} +8 ", out, re.MULTILINE), codec
    assert "index entries checked against the log: no problems" in out
    assert "clean shutdown recognised: yes" in out
    assert "arrives with the tiered-storage work" in out
    assert err == ""


def test_demo_again_on_the_same_dir_appends_after_what_is_there(tmp_path: Path) -> None:
    first = run_demo(tmp_path, say=lambda _line: None)
    lines: list[str] = []
    second = run_demo(tmp_path, say=lines.append)

    assert second.first_offset == first.log_end_offset == DEMO_RECORDS
    assert second.reopened_log_end_offset == 2 * DEMO_RECORDS
    assert second.clean_shutdown_recognised
    assert any("already holds offsets up to 4000" in line for line in lines)
    _check_files_agree(tmp_path, _claims("\n".join(lines)))


def test_demo_console_script_in_a_fresh_temp_dir(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("tierlog")
    command = str(script) if script.exists() else shutil.which("tierlog")
    assert command, "the tierlog console script is not installed"
    env = {"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [command, "demo"], capture_output=True, text=True, timeout=120, env=env, check=False
    )

    assert done.returncode == 0, done.stderr
    announced = re.search(
        r"^tierlog demo: the embedded store end to end, in (\S+)$", done.stdout, re.M
    )
    assert announced
    data_dir = Path(announced[1])
    assert data_dir.parent == tmp_path and data_dir.name.startswith("tierlog-demo-")
    claims = _claims(done.stdout)
    assert claims["reopened_end"] == DEMO_RECORDS
    _check_files_agree(data_dir, claims)
