"""``make test``'s stage runner: background chains, waits, and the table of times."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

STAGES = Path(__file__).with_name("stages.py")

# ``build`` stands for a compile behind the tests: it finishes only once ``release`` (a
# foreground stage) has run, so a stage that sees its output was truly waited for. Its
# loop runs in a grandchild of make, as ``go build`` does under bootstrap.py.
MAKEFILE = """\
build:
\tsh -c 'echo $$$$ > build.pid; until [ -f released ]; do sleep 0.05; done; touch built'; \
\techo build-output
started:
\tuntil [ -f build.pid ]; do sleep 0.05; done
release:
\ttouch released
check:
\ttest -f built
after:
\ttouch after-ran
fail:
\texit 3
where:
\tsh -c 'cat /proc/$$$$/stat > where.stat'
"""


def run_stages(tmp_path: Path, *stages: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "Makefile").write_text(MAKEFILE)
    return subprocess.run(
        [sys.executable, str(STAGES), *stages],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def stage_lines(output: str) -> dict[str, str]:
    table = output.split("=== stages\n", 1)[1]
    return {line.split()[0]: line for line in table.splitlines()}


def test_a_stage_after_a_wait_sees_what_the_background_stage_built(tmp_path: Path) -> None:
    done = run_stages(tmp_path, "&build", "release", "wait:build", "check", "after")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "build-output" in done.stdout  # the waited stage's log is printed
    lines = stage_lines(done.stdout)
    assert "ok (background)" in lines["build"]
    assert all(" ok" in lines[name] for name in ("release", "check", "after"))
    assert (tmp_path / ".cache" / "stages" / "build.log").is_file()


def test_the_last_stage_waits_for_every_background_stage(tmp_path: Path) -> None:
    done = run_stages(tmp_path, "&build", "release", "check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "build-output" in done.stdout


def test_a_background_stage_runs_at_nice_19_in_this_session_in_a_group_of_its_own(
    tmp_path: Path,
) -> None:
    done = run_stages(tmp_path, "&where", "release")
    assert done.returncode == 0, done.stdout + done.stderr
    fields = (tmp_path / "where.stat").read_text().rsplit(")", 1)[1].split()
    group, session, nice = int(fields[2]), int(fields[3]), int(fields[16])
    assert nice == 19
    # In a session of its own it would be an autogroup of its own, which the scheduler
    # gives as much CPU as this one's whatever its nice.
    assert session == os.getsid(0)
    assert group != os.getpgid(0)  # a stop ends it by its group


def test_a_failed_background_stage_stops_its_chain_and_fails_the_wait(tmp_path: Path) -> None:
    done = run_stages(tmp_path, "&fail,after", "release", "wait:after", "check")
    assert done.returncode != 0
    lines = stage_lines(done.stdout)
    assert "FAILED (exit 2) (background)" in lines["fail"]  # make's code for a failed recipe
    assert "not run (background)" in lines["after"]
    assert "check" not in lines
    assert not (tmp_path / "after-ran").exists()


def test_a_failed_stage_stops_the_background_ones(tmp_path: Path) -> None:
    done = run_stages(tmp_path, "&build", "started", "fail", "check")  # never released
    assert done.returncode == 2
    assert "stopped (background)" in stage_lines(done.stdout)["build"]
    loop = int((tmp_path / "build.pid").read_text())
    assert not Path(f"/proc/{loop}").exists() or process_state(loop) == "Z"


def process_state(pid: int) -> str:
    """The state letter in /proc/PID/stat (Z: ended, not yet reaped by its parent)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_wait_for_an_unknown_stage_is_refused(tmp_path: Path) -> None:
    done = run_stages(tmp_path, "release", "wait:build", "check")
    assert done.returncode == 2
    assert "wait:build names no background stage before it" in done.stderr
