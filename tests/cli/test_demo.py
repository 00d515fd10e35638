"""``tierlog demo`` end to end: a real sidecar process, driven over gRPC; what the demo
prints must be true of the files it leaves, and it leaves no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tierlog.cli.demo import run_demo
from tierlog.cli.demo_kafka import KAFKA_SIDECAR_CONFIGS, KAFKA_TOPIC, both_front_doors
from tierlog.cli.local_sidecar import LocalSidecar
from tierlog.cli.main import main
from tierlog.client import AdminClient, Consumer, TopicPartition
from tierlog.storage.checkpoints import CLEAN_SHUTDOWN_MARKER
from tierlog.storage.records import iter_batches

from .conftest import console_script
from .stopping import FAULTHANDLER_ENV, PROMPT_S, sigint_inherited, stopped

DEMO_RECORDS = 4000
_PIDS = re.compile(r"^   pid (\d+): gRPC on (\S+),", re.MULTILINE)


def _claims(out: str) -> dict[str, int]:
    rolled = re.search(r"the log rolled (\d+) times", out)
    produced = re.search(r"all (\d+) acknowledged in [\d.]+ s: offsets (\d+)\.\.(\d+), contig", out)
    restarted = re.search(
        r"demo-0 log end offset (\d+), the same as before the restart \((\d+)\)", out
    )
    end_metric = re.search(r'tierlog_log_end_offset\{topic="demo",partition="0"\} (\d+)', out)
    assert rolled and produced and restarted and end_metric, out
    return {
        "rolled": int(rolled[1]),
        "produced": int(produced[1]),
        "first": int(produced[2]),
        "last": int(produced[3]),
        "restarted_end": int(restarted[1]),
        "end_before": int(restarted[2]),
        "end_metric": int(end_metric[1]),
    }


def _check_files_agree(data_dir: Path, claims: dict[str, int]) -> None:
    partition = data_dir / "demo-0"
    logs = sorted(partition.glob("*.log"))
    assert len(logs) >= claims["rolled"] + 1 > 1  # a later restart may roll once more
    assert (data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    last_batch = next(
        batches[-1] for path in reversed(logs) if (batches := list(iter_batches(path.read_bytes())))
    )
    assert last_batch.last_offset + 1 == claims["restarted_end"] == claims["end_metric"]


def _assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_demo_through_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--data-dir", str(tmp_path / "data")]) == 0
    out, err = capsys.readouterr()

    claims = _claims(out)
    assert claims["produced"] == DEMO_RECORDS
    assert (claims["first"], claims["last"]) == (0, DEMO_RECORDS - 1)
    assert claims["restarted_end"] == claims["end_before"] == DEMO_RECORDS
    _check_files_agree(tmp_path / "data", claims)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert re.search(rf"^   {codec} +\d+ +800 ", out, re.MULTILINE), codec
    assert f"{DEMO_RECORDS} records, in offset order, each as produced" in out
    assert "index entries checked against the log: no problems" in out
    assert "-> offset 1000 (expected 1000)" in out
    assert out.count("clean-shutdown marker .kafka_cleanshutdown: present") == 2
    assert "recovery scanned 0 bytes: the clean shutdown was recognised" in out
    assert "only the active segment is local" in out
    assert re.search(r"fetched offsets 0\.\.\d+ back \(no longer on local disk", out)
    assert "demo-tiered-0 offsets [0, 3000)" in out
    owned = re.findall(r"the (?:first|second) consumer owns partitions \[(.*?)\] and read 200", out)
    assert sorted(p for share in owned for p in share.split(", ")) == ["0", "1", "2", "3"]
    assert "demo-readers resumed at its commits: 0:50, 1:50, 2:50, 3:50; read 200 records" in out
    # kafka-python (a dev dependency): the step ran, it was not skipped
    assert "kafka-python produced 100 records (acks=all); tierlog's consumer read them" in out
    assert "kafka-python read them through the Kafka listener at offsets 100..199" in out
    assert err == ""
    for pid, _address in _PIDS.findall(out):
        _assert_gone(int(pid))


def test_demo_again_on_the_same_dir_appends_and_keeps_running(tmp_path: Path) -> None:
    first = run_demo(tmp_path, say=lambda _line: None)
    lines: list[str] = []
    second = run_demo(tmp_path, say=lines.append, keep_running=True)
    sidecar = second.kept_running
    assert sidecar is not None
    try:
        out = "\n".join(lines)
        assert second.first_offset == first.log_end_offset == DEMO_RECORDS
        assert second.restarted_log_end_offset == 2 * DEMO_RECORDS
        assert "demo already exists from an earlier run" in out
        assert f"consume --server {sidecar.address} demo --from-beginning" in out
        assert "14. Stop it again" not in out

        with Consumer({"bootstrap.servers": sidecar.address}) as consumer:
            partition = TopicPartition("demo", 0)
            consumer.assign([partition])
            assert consumer.end_offsets([partition])[partition] == 2 * DEMO_RECORDS
    finally:
        assert sidecar.stop() == 0
    _check_files_agree(tmp_path, _claims(out))


def test_demo_console_script_in_a_fresh_temp_dir(tmp_path: Path) -> None:
    env = {"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [console_script("tierlog"), "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    announced = re.search(r"^   data dir (\S+)$", done.stdout, re.MULTILINE)
    assert announced
    data_dir = Path(announced[1])
    assert data_dir.parent == tmp_path and data_dir.name.startswith("tierlog-demo-")
    claims = _claims(done.stdout)
    assert claims["restarted_end"] == DEMO_RECORDS
    _check_files_agree(data_dir, claims)
    pids = [int(pid) for pid, _address in _PIDS.findall(done.stdout)]
    assert len(pids) == 2
    for pid in pids:
        _assert_gone(pid)


@pytest.mark.parametrize(
    ("stop", "status", "sigint_ignored", "moment"),
    [
        (signal.SIGINT, 130, False, "   pid "),
        (signal.SIGINT, 130, True, "   pid "),
        (signal.SIGINT, 130, False, "3. Produce"),
        (signal.SIGTERM, 143, False, "3. Produce"),
    ],
    ids=[
        "from-a-terminal",
        "sigint-ignored-as-a-background-job-of-a-script",
        "sigint-while-it-produces",
        "sigterm-while-it-produces",
    ],
)
def test_ctrl_c_stops_the_sidecar_it_started(
    tmp_path: Path, stop: signal.Signals, status: int, sigint_ignored: bool, moment: str
) -> None:
    """Stopped as its sidecar has just started, or while its clients work (where a
    ``KeyboardInterrupt`` raised in a client's lock could hang its close): it stops at
    its next line, the sidecar it started is stopped cleanly, and it exits at once."""
    # A shell without job control starts background commands with SIGINT ignored (how
    # ``make test &`` ran this test): the demo must take SIGINT all the same.
    with sigint_inherited(sigint_ignored):
        process = subprocess.Popen(
            [console_script("tierlog"), "demo", "--data-dir", str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=FAULTHANDLER_ENV,
        )
    try:
        assert process.stdout is not None
        lines = iter(process.stdout.readline, b"")
        started = next(found for line in lines if (found := _PIDS.match(line.decode())))
        if not started[0].startswith(moment):
            assert any(line.decode().startswith(moment) for line in lines), moment
        elapsed_s, _out, err = stopped(process, stop)
    finally:
        process.kill()
        process.wait()

    assert process.returncode == status, err
    assert elapsed_s < PROMPT_S
    _assert_gone(int(started[1]))
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()  # stopped by SIGTERM, cleanly


def test_the_kafka_step_says_how_to_get_kafka_python_when_it_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sidecar = LocalSidecar.start(tmp_path, configs=KAFKA_SIDECAR_CONFIGS)
    try:
        monkeypatch.setitem(sys.modules, "kafka", None)  # what a missing package imports as
        lines: list[str] = []
        both_front_doors(sidecar, 11, lines.append, _fail)
        assert lines[1] == (
            "   skipped: kafka-python is not installed (pip install 'tierlog[kafka]' brings it)"
        )
        with AdminClient(sidecar.address) as admin:
            assert KAFKA_TOPIC not in admin.list_topics()
    finally:
        assert sidecar.stop() == 0


def _fail(condition: bool, claim: str) -> None:
    assert condition, claim
