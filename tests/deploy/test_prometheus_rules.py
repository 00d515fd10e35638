"""The alert rules of deploy/prometheus/: valid for promtool, and each one unit-tested."""

from __future__ import annotations

import subprocess

import yaml

from tests.deploy.monitoring import RULES, RULES_TEST, alerts
from tests.tools.prometheus import promtool_bin

# Issue 6's list (disk filling, upload lag growing, S3 errors, fsync latency, broker down,
# reconciliation failing) and their neighbours; issue 18's replication alerts; issue 19's
# consumer lag; issue 31's error ratio over both front doors and transaction markers;
# issue 33's tier bound.
EXPECTED = {
    "TierlogBrokerDown",
    "TierlogBrokerNotReady",
    "TierlogLogDirFilling",
    "TierlogLogDirAlmostFull",
    "TierlogFsyncSlow",
    "TierlogRequestErrors",
    "TierlogUnderReplicatedPartitions",
    "TierlogUnderMinIsrPartitions",
    "TierlogOfflinePartitions",
    "TierlogConsumerLagHigh",
    "TierlogTransactionMarkersFailing",
    "TierlogUploadLagGrowing",
    "TierlogUploadStuck",
    "TierlogTierBehindBound",
    "TierlogTierManifestVanished",
    "TierlogS3Errors",
    "TierlogReconciliationFailing",
    "TierlogOperatorDown",
}


def _promtool(*args: str) -> str:
    done = subprocess.run(
        [str(promtool_bin()), *args], cwd=RULES.parent, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_promtool_checks_the_rules() -> None:
    output = _promtool("check", "rules", RULES.name)
    assert f"SUCCESS: {len(alerts())} rules found" in output


def test_promtool_unit_tests_pass() -> None:
    assert "SUCCESS" in _promtool("test", "rules", RULES_TEST.name)


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    names = {alert.name for alert in alerts()}
    assert names == EXPECTED
    assert fired == names


def test_every_alert_has_a_severity_summary_and_description() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for rule in (rule for group in groups for rule in group["rules"]):
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
