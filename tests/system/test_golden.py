"""Golden exposition files: the /metrics text of each scenario, byte for byte.

The one filter is :func:`tests.harness.stable` (durations, timestamps, the busy-time and idle
counters, the energy counter (the fakes integrate power since init) and
the Python version become ``<volatile>``). Regenerate after a reviewed change with:

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/system/test_golden.py

and review ``git diff tests/golden`` like code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness import REPO, SCENARIOS, stable, start

GOLDEN = REPO / "tests" / "golden"
COUNTERS = str(REPO / "tests" / "fixtures" / "default-counters.csv")
#: golden name → (scenario, extra flags)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "h100x4": ("h100x4", ()),
    "h100x4-full": ("h100x4", ("--metrics.detail", "full")),
    "old_gpu": ("old_gpu", ()),
    "mig": ("mig", ()),
    "h100x4-nvlink": ("h100x4", ("--collector.nvlink",)),
    "h100x4-dcgm-exporter": ("h100x4", ("-f", COUNTERS)),
    "mig-dcgm-exporter": ("mig", ("-f", COUNTERS)),
}
NAMES = tuple(CASES)


def _scrape(fakenvml_dir: Path, tmp_path: Path, name: str) -> str:
    # One cycle only (the lifespan waits for it before serving), so the output is deterministic.
    scenario, flags = CASES[name]
    exporter = start(
        fakenvml_dir, SCENARIOS / f"{scenario}.scn", tmp_path, "--collect-interval", "1h", *flags,
        env={"NODE_NAME": "golden-node"},
    )  # fmt: skip
    try:
        return exporter.metrics()
    finally:
        exporter.stop()


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: run scripts/test, which installs Debian's prometheus package"
    return path


@pytest.mark.parametrize("name", [name for name in NAMES if "-f" not in CASES[name][1]])
def test_promtool_check_metrics_is_silent(fakenvml_dir: Path, tmp_path: Path, name: str) -> None:
    text = _scrape(fakenvml_dir, tmp_path, name)
    result = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), result.stdout + result.stderr


def _dcgm_fabric() -> str:
    """The h100x4 host on the DCGM fake with NVLink and NVSwitch collectors on, two NVSwitches added
    (one with a port down, one with a blank temperature and a fatal SXid), one cycle in process."""
    from gpu_exporter.assemble import bare_sampler
    from gpu_exporter.backends.dcgm import DcgmBackend
    from gpu_exporter.backends.dcgm.values import INT64_BLANK
    from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs
    from tests.dcgmfake import from_scenario, int64

    fake = from_scenario((SCENARIOS / "h100x4.scn").read_text())
    for switch in (0, 1):
        fields = {
            858: int64(INT64_BLANK if switch else 46), 859: int64(95), 860: int64(105), 705: int64(29),
            706: int64(11), 707: int64(4), 701: int64(850), 864: int64(0), 863: int64(8 + switch),
            866: int64(0), 867: int64(5 + switch), 868: int64(0), 869: int64(0),
        }  # fmt: skip
        if switch:
            fields[856] = int64(12028)  # a fatal SXid DCGM holds
        errors = {784: int64(12), 785: int64(0), 786: int64(0), 787: int64(3)}
        fake.add_nvswitch(switch, [0, 1], fields, down_ports=[2] if switch == 0 else [], port_fields={0: errors})
    collectors = DEFAULT_COLLECTORS | {"nvlink", "nvswitch"}
    specs = enabled_specs(collectors)
    backend = DcgmBackend(lambda: fake, specs, 3600.0)
    sampler = bare_sampler(backend, specs, 3600.0, "golden", watch_events=True)
    try:
        return sampler.run_cycle().rendered.text.decode()
    finally:
        sampler.stop()


def test_dcgm_fabric_exposition_matches_golden_and_promtool() -> None:
    """NVLink and NVSwitch series on the DCGM backend (the only backend that sees NVSwitches)."""
    text = stable(_dcgm_fabric())
    golden = GOLDEN / "dcgm-h100x4-fabric.prom"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text(), f"/metrics differs from {golden}; see the module docstring to regenerate"
    result = subprocess.run(
        [promtool(), "check", "metrics"], input=_dcgm_fabric(), capture_output=True, text=True, timeout=60, check=False
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), result.stdout + result.stderr
