"""deploy/systemd/gpu-exporter.service: ``systemd-analyze verify`` (in a scratch root holding the unit, the
system's own units and a stand-in at the ExecStart path) and ``systemd-analyze security --offline``,
plus the hardening the unit promises.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness import REPO

UNIT = REPO / "deploy" / "systemd" / "gpu-exporter.service"
#: The unit for Slurm and shared nodes: root without capabilities, every process visible in /proc.
ATTRIBUTION = REPO / "deploy" / "systemd" / "gpu-exporter-attribution.service"
UNITS = pytest.mark.parametrize("unit", [UNIT, ATTRIBUTION], ids=["hardened", "attribution"])
SYSTEM_UNITS = (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"))


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.fail("systemd-analyze not found: run scripts/test, which installs Debian's systemd", pytrace=False)
    return found


def settings(unit: Path = UNIT) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


@UNITS
def test_systemd_analyze_verify(tmp_path: Path, unit: Path) -> None:
    root = tmp_path / "root"
    units = next(path for path in SYSTEM_UNITS if path.is_dir())
    shutil.copytree(units, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copyfile(unit, root / "etc/systemd/system" / unit.name)
    executable = root / settings(unit)["ExecStart"][0].split()[0].lstrip("/")
    executable.parent.mkdir(parents=True)
    executable.write_text("#!/bin/sh\nexit 0\n")
    executable.chmod(0o755)
    result = subprocess.run([systemd_analyze(), "verify", f"--root={root}", unit.name], capture_output=True,
                            text=True, timeout=60, check=False)  # fmt: skip
    # verify exits 0 on settings it cannot parse and only says so: any output is a finding.
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


def test_systemd_analyze_security_exposure_is_low() -> None:
    result = subprocess.run([systemd_analyze(), "security", "--offline=true", "--no-pager", str(UNIT)],
                            capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 2.0, result.stdout


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


def test_attribution_unit_exposure() -> None:
    result = subprocess.run([systemd_analyze(), "security", "--offline=true", "--no-pager", str(ATTRIBUTION)],
                            capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 2.5, result.stdout  # 2.2 at this writing (the hardened unit: <= 2.0)


def test_attribution_works_under_the_attribution_units_proc_and_not_the_hardened_ones(
    fakenvml_dir: Path, tmp_path: Path
) -> None:
    """systemd is not PID 1 here, so the units cannot run; their /proc settings can, with the kernel's own
    mechanism: ProtectProc=invisible is /proc mounted with hidepid=invisible, seen by the hardened unit's
    unprivileged user; the attribution unit's is a plain /proc seen by root without capabilities. A root
    process on GPU 0 is named under the second and not under the first. Needs root and unshare (skipped
    otherwise); a few seconds."""
    import os
    import tempfile

    from tests.harness import SCENARIOS, value
    from tests.test_faults import wait_for
    from tests.webtls import launch

    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
        pytest.skip("needs root, unshare and setpriv to mount a /proc as the units do")
    shared = Path(tempfile.mkdtemp(prefix="gpu-exporter-unit-"))  # readable by the unprivileged user
    shared.chmod(0o755)
    lib = shared / "lib"
    shutil.copytree(fakenvml_dir, lib)
    owned = subprocess.Popen(["sleep", "60"])  # a root process on GPU 0
    scenario = shared / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + f"gpu0.process.0.pid = {owned.pid}\n")
    for path in (shared, lib, *lib.iterdir(), scenario):
        path.chmod(0o755 if path.is_dir() or path.suffix == ".so" else 0o644)
    names = {}
    try:
        for unit, options, user in (
            ("hardened", "hidepid=invisible", ("--reuid=65534", "--regid=65534", "--clear-groups")),
            ("attribution", "defaults", ("--clear-groups", "--inh-caps=-all", "--bounding-set=-all")),
        ):
            proc = shared / f"proc-{unit}"
            proc.mkdir()
            mount = f'mount -t proc -o {options} proc {proc} && exec setpriv {" ".join(user)} "$0" "$@"'
            exporter = launch(
                lib, tmp_path, "--path.procfs", str(proc), "--collect-interval", "200ms",
                scenario=scenario, prefix=("unshare", "-m", "sh", "-c", mount),
                ready=lambda e: e.get("/healthz").status_code == 200,
            )  # fmt: skip
            try:
                parsed = wait_for(exporter, lambda p: value(p, "gpu_processes", gpu="0", pid=str(owned.pid)) == 1)
            finally:
                exporter.stop()
            [labels] = [dict(k) for k in parsed["gpu_processes"] if dict(k)["pid"] == str(owned.pid)]
            names[unit] = (labels["process"], labels["user"])
    finally:
        owned.kill()
        owned.wait()
        shutil.rmtree(shared, ignore_errors=True)
    assert names == {"hardened": ("", ""), "attribution": ("sleep", "root")}, names
