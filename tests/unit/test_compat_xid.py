"""The shared Xid table in both modes: the native table (status page, pre-created counters, alert
rules) and, in dcgm-exporter mode only, dcgm-exporter's own err_msg texts."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_exporter.catalogue import PRECREATED_XIDS, XID_CODES
from gpu_exporter.compat.xid import XID_TEXTS, xid_text
from tests.harness import REPO

FIXTURE = REPO / "tests" / "fixtures" / "default-counters.csv"
# code → (a phrase of our own description, its severity, dcgm-exporter's err_msg)
COMMON: dict[int, tuple[str, str, str]] = {
    8: ("GPU stopped processing", "warning", "GPU stopped processing"),
    13: ("graphics engine exception", "warning", "Graphics Engine Exception"),
    31: ("GPU memory page fault", "warning", "GPU memory page fault"),
    48: ("double-bit (uncorrectable) ECC error", "critical", "Double Bit ECC Error"),
    79: ("GPU has fallen off the bus", "critical", "GPU has fallen off the bus"),
    94: ("contained memory error", "warning", "Contained ECC error"),
    95: ("uncontained memory error", "critical", "Uncontained ECC error"),
}


def test_the_table_holds_every_code_of_nvidias_catalogue() -> None:
    assert sorted(XID_CODES) == list(range(1, 173))
    assert sorted(XID_TEXTS) == list(range(173))  # dcgm-exporter's texts: 0 ("No Error") to 172
    for code, xid in XID_CODES.items():
        assert xid.description and xid.action and xid.severity in ("critical", "warning", "info"), code
    # the pre-created (alerting) subset: the codes worth a zero series on every GPU, not all 172
    assert set(PRECREATED_XIDS) >= set(COMMON) and len(PRECREATED_XIDS) < 40
    assert all(XID_CODES[code].group != "unused" for code in PRECREATED_XIDS)


@pytest.mark.parametrize("code", sorted(COMMON))
def test_common_codes_in_both_tables(code: int) -> None:
    phrase, severity, text = COMMON[code]
    assert phrase in XID_CODES[code].description and XID_CODES[code].severity == severity
    assert xid_text(code) == text


def _last_codes(compat: bool, status: dict[str, Any], parsed: dict[Any, Any]) -> dict[int, int]:
    """Each GPU's last Xid code: from DCGM_FI_DEV_XID_ERRORS in dcgm-exporter mode, else from the status API."""
    if compat:
        return {int(dict(labels)["gpu"]): int(v) for labels, v in parsed.get("DCGM_FI_DEV_XID_ERRORS", {}).items()}
    return {gpu["index"]: (gpu["xid"] or {}).get("last") for gpu in status["gpus"]}
