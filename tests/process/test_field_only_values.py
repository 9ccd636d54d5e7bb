"""NVML's field-only values out of process on the fake: HW slowdown times (fields 270, 271), PCIe
correctable errors (173), the GPU recovery action (230) and power smoothing's settings (251-268),
all in the one field-value batch, natively and under their DCGM names (1423-1442, 1501, 1523) in
DCGM's types: INT64 whole (ns, ms), doubles for watts, percents and mW/s."""

from __future__ import annotations

from pathlib import Path

from tests.harness import SCENARIOS, samples, start, value

CSV = """\
DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS, counter, HW thermal slowdown time.
DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN_NS, counter, HW power brake slowdown time.
DCGM_FI_DEV_PCIE_CORRECTABLE_ERROR_TOTAL, counter, PCIe correctable errors.
DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION, gauge, Recovery action.
DCGM_FI_DEV_PWR_SMOOTHING_ENABLED, gauge, Power smoothing enabled.
DCGM_FI_DEV_PWR_SMOOTHING_APPLIED_TMP_CEIL, gauge, Applied TMP ceiling (W).
DCGM_FI_DEV_PWR_SMOOTHING_APPLIED_TMP_FLOOR_WATTS, gauge, Applied TMP floor (W).
DCGM_FI_DEV_PWR_SMOOTHING_PROFILE_PERCENT_TMP_FLOOR, gauge, Profile floor (%).
DCGM_FI_DEV_PWR_SMOOTHING_PROFILE_RAMP_UP_RATE, gauge, Profile ramp up (mW/s).
DCGM_FI_DEV_PWR_SMOOTHING_PROFILE_RAMP_DOWN_HYST_VAL, gauge, Profile hysteresis (ms).
DCGM_FI_DEV_PWR_SMOOTHING_ADMIN_OVERRIDE_PERCENT_TMP_FLOOR, gauge, Override floor (%).
DCGM_FI_DEV_PWR_SMOOTHING_HW_CIRCUITRY_PERCENT_LIFETIME_REMAINING, gauge, Lifetime left (%).
"""


def test_native_values_and_absence(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "1h", "--metrics.detail=full"
    )  # fmt: skip
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    assert value(parsed, "gpu_clock_hw_slowdown_seconds_total", gpu="3", reason="hw_thermal") == 2.500000001
    assert value(parsed, "gpu_clock_hw_slowdown_seconds_total", gpu="3", reason="hw_power_brake") == 0.0
    assert value(parsed, "gpu_clock_hw_slowdown_seconds_total", gpu="0", reason="hw_thermal") is None  # no key
    assert value(parsed, "gpu_pcie_correctable_errors_total", gpu="3") == 17.0
    assert value(parsed, "gpu_recovery_action", gpu="3") == 1.0
    assert value(parsed, "gpu_recovery_action", gpu="1") is None
    assert value(parsed, "gpu_power_smoothing_applied_floor_watts", gpu="0") == 455.5
    assert value(parsed, "gpu_power_smoothing_profile_floor_ratio", gpu="0", preset_profile="0") == 0.65
    assert value(parsed, "gpu_power_smoothing_profile_ramp_up_watts_per_second", gpu="0", preset_profile="0") == 100
    assert value(parsed, "gpu_power_smoothing_profile_ramp_down_hysteresis_seconds", gpu="0", preset_profile="0") == 2.5
    assert value(parsed, "gpu_power_smoothing_override_floor_ratio", gpu="0") == 0.7025
    assert value(parsed, "gpu_power_smoothing_enabled", gpu="2") is None  # NOT_SUPPORTED: absent, never 0
    # Only preset profile 0 is read (scopeId 0, as DCGM): profile 1's floor is in the scenario, not served.
    assert {dict(labels)["preset_profile"] for labels in parsed["gpu_power_smoothing_profile_floor_ratio"]} == {"0"}


def test_dcgm_exporter_names_in_dcgm_types(fakenvml_dir: Path, tmp_path: Path) -> None:
    csv = tmp_path / "fields.csv"
    csv.write_text(CSV)
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(csv), "--collect-interval", "1h")
    try:
        exposition = exporter.metrics()
    finally:
        exporter.stop()
    parsed = samples(exposition)
    counter = lambda name, gpu: value(parsed, f"{name}_total", gpu=gpu)  # noqa: E731 - the parser adds _total
    assert counter("DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS", "3") == 2500000001  # whole ns
    assert counter("DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN_NS", "3") == 0
    assert counter("DCGM_FI_DEV_PCIE_CORRECTABLE_ERROR_TOTAL", "3") == 17
    assert value(parsed, "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", gpu="3") == 1
    assert value(parsed, "DCGM_FI_DEV_PWR_SMOOTHING_ENABLED", gpu="0") == 1
    assert value(parsed, "DCGM_FI_DEV_PWR_SMOOTHING_APPLIED_TMP_CEIL", gpu="0") == 700.0
    assert value(parsed, "DCGM_FI_DEV_PWR_SMOOTHING_APPLIED_TMP_FLOOR_WATTS", gpu="0") == 455.5  # DCGM 4.x's name
    assert value(parsed, "DCGM_FI_DEV_PWR_SMOOTHING_PROFILE_PERCENT_TMP_FLOOR", gpu="0") == 65.0  # percent
    assert value(parsed, "DCGM_FI_DEV_PWR_SMOOTHING_PROFILE_RAMP_UP_RATE", gpu="0") == 100000.0  # mW/s
    assert value(parsed, "DCGM_FI_DEV_PWR_SMOOTHING_PROFILE_RAMP_DOWN_HYST_VAL", gpu="0") == 2500  # ms
    assert value(parsed, "DCGM_FI_DEV_PWR_SMOOTHING_ADMIN_OVERRIDE_PERCENT_TMP_FLOOR", gpu="0") == 70.25
    assert value(parsed, "DCGM_FI_DEV_PWR_SMOOTHING_HW_CIRCUITRY_PERCENT_LIFETIME_REMAINING", gpu="0") == 98.5
    assert 'DCGM_FI_DEV_PWR_SMOOTHING_ENABLED{gpu="2"' not in exposition
    assert 'DCGM_FI_DEV_PWR_SMOOTHING_PROFILE_RAMP_DOWN_HYST_VAL{gpu="0"' in exposition
    # INT64 fields print as whole numbers, doubles keep their fraction.
    assert any(line.endswith(" 2500") for line in exposition.splitlines() if "HYST_VAL{" in line)


def test_gpm_support_flag(fakenvml_dir: Path, tmp_path: Path) -> None:
    """DCGM 94 from nvmlGpmQueryDeviceSupport, read once at discovery: 1 on GPU 0, 0 where NVML
    answers isSupportedDevice 0 (GPU 3) and where it answers NOT_SUPPORTED (GPUs 1, 2), as DCGM."""
    csv = tmp_path / "gpm.csv"
    csv.write_text("DCGM_FI_DEV_GPM_SUPPORT, gauge, GPM support.\n")
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(csv), "--collect-interval", "1h")
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    support = {gpu: value(parsed, "DCGM_FI_DEV_GPM_SUPPORT", gpu=gpu) for gpu in "0123"}
    assert support == {"0": 1.0, "1": 0.0, "2": 0.0, "3": 0.0}
