"""What every tool installer shares: the ``Tool`` record, the error, running commands.

``bootstrap.py`` drives the tools; each tool that needs more than a few lines lives in
its own module beside it (``helm.py``, ``prometheus.py``) and builds its ``Tool`` from
these parts. Standard library only: this runs before the venv's packages matter.

Two caches: ``.cache/tools/<name>`` in the checkout is what the tests use (stamped by
the hash of the tool's inputs), and ``~/.cache/tierlog-tools/<name>`` (or
``$TIERLOG_TOOLS_CACHE``) keeps slow builds, keyed by version, so a fresh clone on the
same machine copies a binary instead of compiling it again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CACHE_DIR",
    "REPO",
    "SHARED_CACHE",
    "WITHOUT_COMPILED_TOOLS",
    "BootstrapError",
    "Tool",
    "go_build",
    "go_test_build",
    "link_into",
    "module_files",
    "require",
    "run",
    "shared_build",
]

REPO = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO / ".cache" / "tools"
SHARED_CACHE = Path(
    os.environ.get("TIERLOG_TOOLS_CACHE", Path.home() / ".cache" / "tierlog-tools")
).expanduser()
STAMP_NAME = ".stamp"
# Set for the unit tests that run while the Go tools still compile: asking for one of
# them is then an error every time, not only when the build has not finished yet.
WITHOUT_COMPILED_TOOLS = "TIERLOG_WITHOUT_COMPILED_TOOLS"
_COMPLETE = ".complete"


class BootstrapError(Exception):
    """A tool could not be installed; the message says why and what to do."""


@dataclass(frozen=True)
class Tool:
    name: str
    inputs: Callable[[], Sequence[Path]]  # files whose content keys the stamp
    install: Callable[[Path], None]  # fills the given (empty) directory
    # Built from Go source: minutes of both cores cold. ``make test`` builds these behind
    # the tests that need none of them (the ``go_tools`` marker says which do).
    compiled: bool = False

    @property
    def home(self) -> Path:
        return CACHE_DIR / self.name

    def input_hash(self) -> str:
        digest = hashlib.sha256()
        for path in sorted(self.inputs()):
            digest.update(str(path.relative_to(REPO)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
        return digest.hexdigest()

    def is_current(self) -> bool:
        stamp = self.home / STAMP_NAME
        return stamp.is_file() and stamp.read_text().strip() == self.input_hash()

    def require_current(self) -> Path:
        """The tool's home for a test; a clear error when ``make tools`` has not run, or
        when a compiled tool is asked for while the Go builds may still be running."""
        if self.compiled and os.environ.get(WITHOUT_COMPILED_TOOLS):
            raise BootstrapError(
                f"{self.name} is compiled from Go source and this run is without such tools "
                f"({WITHOUT_COMPILED_TOOLS} is set: make unit-no-go-tools); mark the test "
                "go_tools or give it the fixture that needs the tool (tests/conftest.py)"
            )
        if not self.is_current():
            raise BootstrapError(
                f"{self.name} is not installed in {self.home} or is older than its inputs; "
                "run `make tools`"
            )
        return self.home


def run(
    cmd: Sequence[str | Path],
    *,
    what: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """Run a command; on failure raise with its output so the cause is on screen."""
    try:
        done = subprocess.run(
            [str(part) for part in cmd],
            cwd=cwd,
            env=None if env is None else {**os.environ, **env},
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        raise BootstrapError(f"{what}: cannot run {cmd[0]}: {exc}") from exc
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        raise BootstrapError(f"{what} failed (exit {done.returncode}):\n{output}")
    return done.stdout


def require(program: str, hint: str) -> Path:
    found = shutil.which(program)
    if found is None:
        raise BootstrapError(f"`{program}` is not on PATH; {hint}")
    return Path(found)


def shared_build(name: str, build: Callable[[Path], None]) -> Path:
    """``SHARED_CACHE/name``, built by ``build`` into a fresh directory when absent.

    Built beside its final place and renamed in once complete (marker last), so a
    killed build is redone rather than trusted; a concurrent finished build wins.
    """
    final = SHARED_CACHE / name
    if (final / _COMPLETE).is_file():
        print(f"  reusing {final}")
        return final
    partial = SHARED_CACHE / f"{name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        build(partial)
        (partial / _COMPLETE).write_text(name + "\n")
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return final


# readonly: the committed go.sum is the pin; a build never edits go.mod.
_GO_BUILD_ENV = {"GOFLAGS": "-mod=readonly -buildvcs=false"}


def go_build(module_dir: Path, packages: Sequence[str], output: str, ldflags: str) -> None:
    """``go build -o output`` (a directory, with a trailing slash, for several packages)."""
    go = require("go", "install Go 1.26+ (https://go.dev/dl)")
    run(
        [go, "build", "-trimpath", "-ldflags", ldflags, "-o", output, *packages],
        what=f"go build {' '.join(packages)}",
        cwd=module_dir,
        env=_GO_BUILD_ENV,
    )


def go_test_build(module_dir: Path, package: str, output: Path) -> None:
    """``go test -c -o output package``: a package's tests as one binary, to be run later
    (against a server); ``package`` may live in a module the wrapper requires."""
    go = require("go", "install Go 1.26+ (https://go.dev/dl)")
    run(
        [go, "test", "-c", "-trimpath", "-o", output, package],
        what=f"go test -c {package}",
        cwd=module_dir,
        env=_GO_BUILD_ENV,
    )


def link_into(home: Path, built: Path, names: Sequence[str]) -> None:
    """Hard links (copies across filesystems) of ``built/name`` into a tool's home."""
    for name in names:
        try:
            os.link(built / name, home / name)
        except OSError:  # another filesystem
            shutil.copy2(built / name, home / name)


def go_command_tool(
    name: str,
    version: str,
    module_dir: Path,
    package: str,
    *,
    command: str,
    version_flag: str,
    ldflags: str = "-s -w",
    cold_build: str = "a few minutes",
) -> Tool:
    """A tool that is one command built from a wrapper module (``module_dir/go.mod``
    pins it): built once per machine into the shared cache, linked into the tool's
    home, and installed only once it says the version that go.mod asked for."""

    def build(into: Path) -> None:
        print(f"  building {command} {version} from the Go module proxy ({cold_build} cold)")
        go_build(module_dir, [package], str(into / command), ldflags)

    def install(home: Path) -> None:
        link_into(home, shared_build(_build_key(name, version, module_dir), build), [command])
        said = run([home / command, version_flag], what=f"{command} {version_flag}")
        if version.removeprefix("v") not in said:
            raise BootstrapError(f"expected {command} {version}, it says {said!r}")
        print(f"  {command} runs: {said.strip().splitlines()[0]}")

    return Tool(
        name=f"{name}-{version}",
        inputs=lambda: [Path(__file__), *module_files(module_dir)],
        install=install,
        compiled=True,
    )


def module_files(module_dir: Path) -> list[Path]:
    """A wrapper module's go.mod, go.sum and Go sources (a ``main.go`` of its own)."""
    return sorted([*module_dir.glob("go.*"), *module_dir.glob("*.go")])


def _build_key(name: str, version: str, module_dir: Path) -> str:
    """The shared cache's name for a build: the version and, for a wrapper with a main
    of its own (whose imports decide what is compiled in), a digest of its module."""
    if not any(module_dir.glob("*.go")):
        return f"{name}-{version}"
    digest = hashlib.sha256()
    for path in module_files(module_dir):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{name}-{version}-{digest.hexdigest()[:12]}"
