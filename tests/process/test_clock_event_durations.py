"""DCGM_FI_DEV_CLOCKS_EVENT_REASON_{SW_POWER_CAP,SYNC_BOOST,SW_THERM_SLOWDOWN}_NS (1420-1422) on the
NVML backend, out of process on the fake: NVML's clock-event duration fields for these reasons are its
perf-policy violation counters, so they are gpu_clock_throttle_seconds_total{reason} in whole
nanoseconds (an odd count survives the seconds round trip)."""

from __future__ import annotations

from pathlib import Path

from tests.harness import SCENARIOS, samples, start, value

CSV = """\
DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS, gauge, Power cap time.
DCGM_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST_NS, gauge, Sync boost time.
DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN_NS, gauge, SW thermal time.
DCGM_FI_DEV_POWER_VIOLATION, gauge, Power violation.
"""


def test_durations_are_the_violation_counters_in_nanoseconds(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "durations.scn"
    text = (SCENARIOS / "h100x4.scn").read_text()
    scenario.write_text(text + "gpu0.violation.power = 123456789\ngpu0.violation.thermal = 987654321987\n")
    csv = tmp_path / "durations.csv"
    csv.write_text(CSV)
    exporter = start(fakenvml_dir, scenario, tmp_path, "-f", str(csv), "--collect-interval", "1h")
    try:
        exposition = exporter.metrics()
    finally:
        exporter.stop()
    parsed = samples(exposition)
    assert value(parsed, "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS", gpu="0") == 123456789
    assert value(parsed, "DCGM_FI_DEV_POWER_VIOLATION", gpu="0") == 123456789
    assert value(parsed, "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN_NS", gpu="0") == 987654321987
    assert value(parsed, "DCGM_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST_NS", gpu="0") == 0
    assert 'DCGM_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP_NS{gpu="0"' in exposition
