"""Golden exposition files: the /metrics text of each scenario, byte for byte.

The one filter is :func:`tests.harness.stable` (durations, timestamps, the busy-time counter and
the Python version become ``<volatile>``). Regenerate after a reviewed change with:

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_golden.py

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


@pytest.mark.parametrize("name", NAMES)
def test_exposition_matches_golden(fakenvml_dir: Path, tmp_path: Path, name: str) -> None:
    text = stable(_scrape(fakenvml_dir, tmp_path, name))
    golden = GOLDEN / f"{name}.prom"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"{golden} missing: run UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_golden.py"
    assert text == golden.read_text(), f"/metrics differs from {golden}; see the module docstring to regenerate"


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
