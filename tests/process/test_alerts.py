"""The process-tier tests of tests/unit/test_alerts.py (split by what they start)."""

from __future__ import annotations

import re
import sys

from gpu_exporter.catalogue import (
    XID_CODES,
)
from tests.unit.test_alerts import ALERTS, _xid_selector, alert_rules, run


def test_xid_rules_follow_the_shared_xid_table() -> None:
    result = run(sys.executable, str(ALERTS / "generate.py"), "check")
    assert result.returncode == 0, result.stderr
    xid_rules = [rule for rule in alert_rules() if rule["alert"] == "GPUXidError"]
    assert sorted(rule["labels"]["severity"] for rule in xid_rules) == ["critical", "info", "warning"]
    expected = {str(code): xid.severity for code, xid in XID_CODES.items()} | {"999": "warning", "0": "warning"}
    for code, severity in expected.items():
        matching = []
        for rule in xid_rules:
            op, regex = _xid_selector(rule)
            if (re.fullmatch(regex, code) is not None) == (op == "=~"):
                matching.append(rule["labels"]["severity"])
        assert matching == [severity], f"Xid {code}: rules {matching}, table {severity}"
    assert {severity for severity in expected.values()} == {"critical", "warning", "info"}
