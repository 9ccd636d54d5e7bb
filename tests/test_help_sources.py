"""Each HELP text names the NVML call the backend actually makes: values NVML offers as fields are read
in the GPU's one nvmlDeviceGetFieldValues call (power said nvmlDeviceGetPowerUsage, which does not run)."""

from __future__ import annotations

from pathlib import Path

from gpu_exporter.backends.nvml.fields import _LANE_FIELDS, _SCOPED_LINK_FIELDS, DEVICE_FIELDS
from gpu_exporter.catalogue.vocabulary import READ_AS_FIELD
from tests.harness import SCENARIOS, start

_FIELDS = "nvmlDeviceGetFieldValues"


def test_the_catalogues_field_list_is_the_backends() -> None:
    backend = {key for key in (*DEVICE_FIELDS, *_SCOPED_LINK_FIELDS) if key[0] != _FIELDS}
    backend |= {("nvmlDeviceGetNvLinkErrorCounter", selector) for selector in _LANE_FIELDS}
    assert backend == READ_AS_FIELD


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
