"""The unit-tier tests of tests/system/test_deploy_systemd.py (split by what they start)."""

from __future__ import annotations

from tests.system.test_deploy_systemd import ATTRIBUTION, UNIT, settings


def test_unit_hardening() -> None:
    unit = settings()
    assert unit["DynamicUser"] == ["yes"]
    assert unit["ProtectSystem"] == ["strict"] and unit["Restart"] == ["on-failure"]
    assert unit["DevicePolicy"] == ["closed"]
    assert all(value.startswith("char-nvidia") for value in unit["DeviceAllow"])  # /dev/nvidia* only
    assert unit["CapabilityBoundingSet"] == [""] and unit["NoNewPrivileges"] == ["yes"]
    assert "PrivateDevices" not in unit  # it would hide /dev/nvidia*
    assert unit["Type"] == ["exec"] and unit["ExecStart"][0].endswith("/gpu-exporter")


def test_attribution_unit_sees_every_process_and_keeps_the_rest_hardened() -> None:
    """The hardened unit hides other users' processes (ProtectProc=invisible under a dynamic user), so it
    cannot attribute; the attribution unit differs from it only in what attribution needs."""
    hardened, attribution = settings(UNIT), settings(ATTRIBUTION)
    assert hardened["ProtectProc"] == ["invisible"] and hardened["DynamicUser"] == ["yes"]
    assert attribution["ProtectProc"] == ["default"] and attribution["ProcSubset"] == ["all"]
    assert "DynamicUser" not in attribution and "User" not in attribution  # root: NVML lists every process
    differ = {key for key in hardened.keys() | attribution.keys() if hardened.get(key) != attribution.get(key)}
    assert differ == {"Description", "DynamicUser", "ProtectProc", "ProcSubset"}, differ
    for unit in (UNIT, ATTRIBUTION):
        assert "pip install gpu-exporter" not in unit.read_text()  # not published: install from a checkout
