"""The API's committed stubs are what ``proto/`` generates, and the protos pass buf lint."""

from __future__ import annotations

import filecmp
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tierlog.api.generate import PROTO_ROOT, STUBS_DIR, generate

REPO = Path(__file__).resolve().parents[2]


def _bootstrap() -> ModuleType:
    """tests/tools/bootstrap.py, which owns where tools live and when they are current."""
    name = "tierlog_tests_bootstrap"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "tools" / "bootstrap.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    fresh = generate(tmp_path / "v1")
    committed = sorted(path.name for path in STUBS_DIR.iterdir() if path.is_file())
    assert sorted(path.name for path in fresh) == committed, (
        "stub files differ; run `python -m tierlog.api.generate`"
    )
    _match, mismatch, errors = filecmp.cmpfiles(
        tmp_path / "v1", STUBS_DIR, committed, shallow=False
    )
    assert not mismatch and not errors, (
        f"{mismatch + errors} drifted from proto/; run `python -m tierlog.api.generate`"
    )


def test_stubs_carry_the_versioned_wire_names() -> None:
    from tierlog.api.v1 import admin_service_pb2, log_service_pb2

    assert log_service_pb2.DESCRIPTOR.package == "tierlog.v1"
    assert log_service_pb2.DESCRIPTOR.services_by_name["LogService"].full_name == (
        "tierlog.v1.LogService"
    )
    assert "AdminService" in admin_service_pb2.DESCRIPTOR.services_by_name
    assert log_service_pb2.ProduceRequest.__module__ == "tierlog.api.v1.log_service_pb2"


def test_protos_pass_buf_lint() -> None:
    bootstrap = _bootstrap()
    buf = bootstrap.buf_bin()
    assert bootstrap.BUF.is_current() and buf.exists(), (
        f"buf is not installed in {buf}; run `make tools`"
    )
    result = subprocess.run(
        [str(buf), "lint"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"buf lint:\n{result.stdout}{result.stderr}"
    assert (PROTO_ROOT / "tierlog" / "v1").is_dir()


def test_buf_lint_catches_a_bad_proto(tmp_path: Path) -> None:
    bootstrap = _bootstrap()
    (tmp_path / "buf.yaml").write_text((REPO / "buf.yaml").read_text())
    package = tmp_path / "proto" / "tierlog" / "v1"
    package.mkdir(parents=True)
    (package / "bad.proto").write_text(
        'syntax = "proto3";\npackage tierlog.v1;\nmessage bad_name { int32 SomeField = 1; }\n'
    )
    result = subprocess.run(
        [str(bootstrap.buf_bin()), "lint"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "bad_name" in result.stdout + result.stderr
