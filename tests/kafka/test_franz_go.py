"""A peer's test suite: franz-go's own client tests against a 3-broker tierlog cluster.

franz-go's ``kgo`` tests reach a real broker through ``KGO_SEEDS``: they create topics
(replication factor 3), produce, consume with classic and KIP-848 groups, run
transactions and clean up as they go, so they check the Kafka listener as a Go service
meets it. The compiled tests (tests/tools/franz_go.py) run once for the module, with
the selection below; each selected test is one pytest case that must have passed.
docs/KAFKA-PROTOCOL.md ("franz-go's suites") lists the whole suite's outcome and why
each test outside the selection is left out. ``kadm``'s tests open no connection (they
check the admin package's own logic); they run here too, as part of the peer's suite.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.local_cluster import kafka_bootstrap, running_cluster
from tests.tools.franz_go import franz_go_test_bin

pytestmark = pytest.mark.go_tools

# kgo's tests that reach the brokers and pass against tierlog, but TestClient_Produce
# (minutes of single-record acks=all produces) and Test848RegexBrokerResolves (racy
# against any broker); docs/KAFKA-PROTOCOL.md says why each other one is left out.
KGO_SELECTED = (
    "TestPing",
    "TestIssue1034",
    "TestUnknownGroupOffsetFetchPinned",
    "TestConsumeTopicRetrieval",
    "TestConsumeTopicRetrieval_Many",
    "TestConsumeRegex",
    "TestIssue325",
    "TestIssue337",
    "TestDirectPartitionPurge",
    "TestIssue434",
    "TestAddRemovePartitions",
    "TestPauseIssue489",
    "TestPauseIssueOct2023",
    "TestIssue523",
    "TestIssue648",
    "TestIssue810",
    "TestIssue865",
    "TestIssueFetchLargerThanBrokerMaxReadBytes",
    "TestPooling",
    "TestGroupSimple",
    "TestHookPollStart",
    "TestConsumeMaxDecompressBatchBytes",
    "TestGroupETL",
    "TestTxnEtl",
    "TestIssue769",
    "TestIssueProduceBrokerTooOldFailsRecords",
    "TestIssueProduceSyncManualPartitionNegativeDoesNotPanic",
    "TestIssue831",
    "TestClient_ProduceLargeMessages",
)
# The suite's knobs (pkg/kgo/helpers_test.go): records per ETL chain (500,000 by default,
# minutes of producing), and the partitions of a test's topics (7, 11 or 31 by default).
KGO_ENV = {"KGO_TEST_RF": "3", "KGO_TEST_RECORDS": "1000", "KGO_TEST_MAX_TOPIC_PARTS": "7"}
# A bound for the whole selection; the module stays near two minutes warm.
SELECTION_TIMEOUT_S = 240

_RESULT = re.compile(r"^\s*--- (PASS|FAIL|SKIP): (\S+) \(")
_STARTED = re.compile(r"^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)")


@dataclass
class GoTest:
    """One test of a ``-test.v`` run: its outcome (None: never ended) and its lines."""

    outcome: str | None = None
    lines: list[str] = field(default_factory=list)


def parse_go_test_output(output: str) -> dict[str, GoTest]:
    """Every test and subtest a ``-test.v`` run named, with its outcome and the lines
    printed while it was the one running."""
    tests: dict[str, GoTest] = {}
    current: str | None = None
    for line in output.splitlines():
        started, result = _STARTED.match(line), _RESULT.match(line)
        if started:
            current = started.group(1)
            tests.setdefault(current, GoTest())
        elif result:
            tests.setdefault(result.group(2), GoTest()).outcome = result.group(1)
        elif current is not None:
            tests[current].lines.append(line)
    return tests


def run_go_tests(
    binary: Path, selection: Sequence[str], env: Mapping[str, str], workdir: Path
) -> tuple[dict[str, GoTest], str]:
    """Run ``selection`` of a compiled Go test binary verbosely: each test's result, and
    the whole output (stdout, then the clients' logs on stderr)."""
    done = subprocess.run(
        [
            binary,
            "-test.v",
            "-test.count=1",
            f"-test.timeout={SELECTION_TIMEOUT_S}s",
            f"-test.run=^({'|'.join(selection)})$",
        ],
        env={**os.environ, **env},
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=SELECTION_TIMEOUT_S + 30,
        check=False,
    )
    return parse_go_test_output(done.stdout), done.stdout + done.stderr


@pytest.fixture(scope="module")
def kgo_results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, GoTest]]:
    binary = franz_go_test_bin("kgo")
    workdir = tmp_path_factory.mktemp("franz-go")
    with running_cluster(workdir / "cluster", 3):
        seeds = {"KGO_SEEDS": kafka_bootstrap(workdir / "cluster"), **KGO_ENV}
        results, output = run_go_tests(binary, KGO_SELECTED, seeds, workdir)
        (workdir / "kgo.out").write_text(output)
        yield results


@pytest.mark.parametrize("name", KGO_SELECTED)
def test_kgo(kgo_results: dict[str, GoTest], name: str) -> None:
    result = kgo_results.get(name, GoTest())
    assert result.outcome == "PASS", f"{name}: {result.outcome}\n" + "\n".join(result.lines)


def test_kadm(tmp_path: Path) -> None:
    results, output = run_go_tests(franz_go_test_bin("kadm"), (".*",), {}, tmp_path)
    top_level = {name: test for name, test in results.items() if "/" not in name}
    assert top_level, output
    failed = [name for name, test in top_level.items() if test.outcome != "PASS"]
    assert not failed, output
