"""What a new user meets in the first minutes, out of process: counters that exist from the start,
the top-level help, flags before a subcommand, the snapshot's and doctor's words. Each test takes
a few seconds."""

from __future__ import annotations

from pathlib import Path

from tests.harness import SCENARIOS, samples, start, value


def test_error_and_invalid_value_counters_start_at_zero(fakenvml_dir: Path, tmp_path: Path) -> None:
    """Their dashboard panels said "No data" until the first event: counters exist at 0 from the start."""
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path)
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    for kind in ("exception", "timeout", "unknown"):
        assert value(parsed, "gpu_exporter_sample_errors_total", kind=kind) == 0, kind
    for field in ("gpu_temperature_celsius", "gpu_utilization_ratio", "gpu_memory_used_bytes", "gpu_power_watts"):
        assert value(parsed, "gpu_exporter_invalid_values_total", field=field) == 0, field
