"""The process-tier tests of tests/unit/test_help_sources.py (split by what they start)."""

from __future__ import annotations

from pathlib import Path

from tests.harness import SCENARIOS, start
from tests.unit.test_help_sources import _FIELDS


def test_power_help_names_the_call_that_runs(fakenvml_dir: Path, tmp_path: Path) -> None:
    """Out of process on the fake NVML with its call trace; a few seconds."""
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, trace=True)
    try:
        text = exporter.metrics()
    finally:
        exporter.stop()
    assert exporter.trace_path is not None
    calls = [line.split()[0] for line in exporter.trace_path.read_text().splitlines()]
    help_line = next(line for line in text.splitlines() if line.startswith("# HELP gpu_power_watts "))
    assert _FIELDS in calls and "nvmlDeviceGetPowerUsage" not in calls  # what runs on this driver
    assert f"Source: NVML {_FIELDS}, else nvmlDeviceGetPowerUsage where the driver has no field for it" in help_line
