"""The recording and alerting rules: valid for Prometheus, unit-tested alert by
alert with promtool, reading only metrics we export, each alert with a runbook."""

import re
import subprocess

import pytest
import yaml

from support.monitoring import (
    REPO,
    RULE_FILES,
    RUNBOOKS,
    alerts,
    exported_names,
    rule_groups,
    selectors,
)
from support.tools import tool
from ttsfleet_runtime.metrics import ERRORS, SERVER_FAULT_ERRORS

PROMTOOL_TESTS = sorted((REPO / "tests" / "monitoring" / "promtool").glob("*_test.yaml"))

# The alerts issue 7 asks for, then the ones for targets that stop being scraped;
# renaming one breaks silences and routes.
ALERTS = {
    "TTSFleetTTFAP99AboveTarget",
    "TTSFleetErrorRatioHigh",
    "TTSFleetGPUUtilizationHigh",
    "TTSFleetQueueDepthHigh",
    "TTSFleetCanaryRolledBack",
    "TTSFleetOnDemandBelowFloor",
    "TTSFleetCUDAOutOfMemory",
    "TTSFleetOperatorReconcileErrors",
    "TTSFleetOperatorDown",
    "TTSFleetOperatorNoLeader",
    "TTSFleetRuntimeTargetDown",
    "TTSFleetNoReadyPods",
}


def test_rule_files_pass_promtool_check():
    result = subprocess.run(
        [tool("promtool"), "check", "rules", *map(str, RULE_FILES)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(RULE_FILES) == 2


def test_alert_unit_tests_pass_promtool():
    result = subprocess.run(
        [tool("promtool"), "test", "rules", *map(str, PROMTOOL_TESTS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_exercised_by_a_promtool_test_that_expects_it_to_fire():
    fired = set()
    for path in PROMTOOL_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                if check.get("exp_alerts"):
                    fired.add(check["alertname"])
    assert {rule["alert"] for rule in alerts()} == ALERTS
    assert fired == ALERTS


def test_rules_read_only_metrics_we_export():
    known = exported_names()
    for group in rule_groups():
        for rule in group["rules"]:
            for name, _ in selectors(rule["expr"]):
                assert name in known, (
                    f"{rule.get('record') or rule.get('alert')}: {name} is exported by nothing"
                )


def test_server_fault_selectors_match_the_runtime_catalogue():
    """The error ratio and the canary analysis count the same error types."""
    patterns = set()
    for group in rule_groups():
        for rule in group["rules"]:
            for name, matchers in selectors(rule["expr"]):
                if name == ERRORS and matchers.get("type", ("", ""))[0] == "Re":
                    patterns.add(matchers["type"][1])
    assert patterns, "no rule selects server-fault error types"
    for pattern in patterns:
        assert set(pattern.split("|")) == set(SERVER_FAULT_ERRORS)


def github_anchor(heading: str) -> str:
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("alert", sorted(ALERTS))
def test_alert_has_labels_annotations_and_a_runbook_section(alert):
    (rule,) = [r for r in alerts() if r["alert"] == alert]
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    base, _, anchor = rule["annotations"]["runbook_url"].partition("#")
    assert base == "https://github.com/ttsfleet/ttsfleet/blob/main/docs/runbooks.md"
    headings = [line[3:] for line in RUNBOOKS.read_text().splitlines() if line.startswith("## ")]
    assert anchor in {github_anchor(h) for h in headings}, (
        f"docs/runbooks.md has no section #{anchor}"
    )
