"""franz-go's client tests, compiled from the Go module proxy to run against tierlog.

franz-go (a Go Kafka client) tests its ``kgo`` package against whatever brokers
``KGO_SEEDS`` names; ``kadm``, its admin package, is a module of its own. The wrapper
module ``tests/tools/franz-go/go.mod`` pins both; ``go test -c`` of each package in it
gives one test binary per package (``kgo.test``, ``kadm.test``), which
tests/kafka/test_franz_go.py runs against a tierlog cluster. The build takes a minute or
two of both cores cold, so it goes into the shared cache
(``~/.cache/tierlog-tools/franz-go-<versions>``) once per machine; the checkout's
``.cache/tools`` holds links to it.
"""

from __future__ import annotations

from pathlib import Path

from tests.tools.control_plane import required_version
from tests.tools.toolkit import (
    REPO,
    BootstrapError,
    Tool,
    go_test_build,
    link_into,
    module_files,
    run,
    shared_build,
)

__all__ = ["FRANZ_GO", "FRANZ_GO_VERSION", "KADM_VERSION", "franz_go_test_bin"]

FRANZ_GO_MODULE_DIR = REPO / "tests" / "tools" / "franz-go"
FRANZ_GO_VERSION = required_version(FRANZ_GO_MODULE_DIR, "github.com/twmb/franz-go")
KADM_VERSION = required_version(FRANZ_GO_MODULE_DIR, "github.com/twmb/franz-go/pkg/kadm")
# Test binary name -> the package whose tests it holds.
_PACKAGES = {
    "kgo.test": "github.com/twmb/franz-go/pkg/kgo",
    "kadm.test": "github.com/twmb/franz-go/pkg/kadm",
}


def _build(into: Path) -> None:
    print(f"  compiling franz-go {FRANZ_GO_VERSION} and kadm {KADM_VERSION}'s tests (go test -c)")
    for binary, package in _PACKAGES.items():
        go_test_build(FRANZ_GO_MODULE_DIR, package, into / binary)


def _install(home: Path) -> None:
    built = shared_build(f"franz-go-{FRANZ_GO_VERSION}-kadm-{KADM_VERSION}", _build)
    link_into(home, built, list(_PACKAGES))
    listed = run([home / "kgo.test", "-test.list", "^TestPing$"], what="kgo.test -test.list")
    if listed.split() != ["TestPing"]:
        raise BootstrapError(f"kgo.test -test.list '^TestPing$' printed {listed!r}")
    print("  kgo.test lists its tests")


FRANZ_GO = Tool(
    name=f"franz-go-{FRANZ_GO_VERSION}",
    inputs=lambda: [Path(__file__), *module_files(FRANZ_GO_MODULE_DIR)],
    install=_install,
    compiled=True,
)


def franz_go_test_bin(package: str) -> Path:
    """The compiled tests of franz-go's ``package`` (``kgo`` or ``kadm``)."""
    return FRANZ_GO.require_current() / f"{package}.test"
