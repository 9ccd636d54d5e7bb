"""GPU rows of the power collector for power smoothing (Blackwell and later): the settings that keep
the board's total module power (TMP) between a floor and a ceiling and ramp it gently.

All are NVML fields 251-268 (``NVML_FI_PWR_SMOOTHING_*``) read in the field-value batch, slowly
(they change only with an administrator's setting), served as DCGM 1425-1442. NVML answers them
only where power smoothing's in-band access privilege is level 1 or 2 (set e.g. over Redfish);
elsewhere they are NOT_SUPPORTED and absent. The per-profile fields (260-263) take the preset
profile as scopeId: gpu-exporter, like DCGM, reads scopeId 0, so they are preset profile 0's values
and carry ``preset_profile="0"``. NVML's units: W for the applied ceiling and floor, percent (of the
board's power limit) for floors and the lifetime left, mW/s for ramp rates, ms for hysteresis.
"""

from __future__ import annotations

from fractions import Fraction

from gpu_exporter.catalogue.spec import FULL, STATIC, DcgmSource, MetricSpec, NvmlSource
from gpu_exporter.catalogue.spec import gauge as _gauge

_PERCENT = Fraction(1, 100)  # percent → ratio
_MILLI = Fraction(1, 1000)  # mW/s → W/s, ms → s
_PROFILE = (("preset_profile", "0"),)  # NVML scopeId 0, as DCGM reads the per-profile fields


def _row(
    name: str,
    unit: str,
    description: str,
    selector: str,
    field_id: int,
    compat: str,
    scale: Fraction = Fraction(1),
    **kwargs: object,
) -> MetricSpec:
    """One power smoothing setting: NVML field ``selector`` × ``scale``, DCGM field ``field_id`` in NVML's unit."""
    return _gauge(
        name, unit, description, "power", NvmlSource("nvmlDeviceGetFieldValues", f"power_smoothing_{selector}", scale),
        DcgmSource(field_id, scale), compat, 1 / scale, every=STATIC, **kwargs,
    )  # fmt: skip


_D = "DCGM_FI_DEV_PWR_SMOOTHING_"

ROWS: tuple[MetricSpec, ...] = (
    _row("gpu_power_smoothing_enabled", "", "1 while power smoothing is enabled", "enabled", 1425, _D + "ENABLED",
         maximum=1),
    _row("gpu_power_smoothing_privilege_level", "", "Power smoothing's in-band access privilege level (0-2)",
         "priv_lvl", 1426, _D + "PRIV_LVL", maximum=255, detail=FULL),
    _row("gpu_power_smoothing_immediate_ramp_down_enabled", "", "1 while immediate ramp down is enabled",
         "imm_ramp_down_enabled", 1427, _D + "IMM_RAMP_DOWN_ENABLED", maximum=1, detail=FULL),
    _row("gpu_power_smoothing_applied_ceiling_watts", "watts", "Total module power ceiling applied", "applied_tmp_ceil",
         1428, _D + "APPLIED_TMP_CEIL"),
    _row("gpu_power_smoothing_applied_floor_watts", "watts", "Total module power floor applied", "applied_tmp_floor",
         1429, _D + "APPLIED_TMP_FLOOR"),
    _row("gpu_power_smoothing_floor_setting_max_ratio", "ratio", "Largest floor setting allowed, of the power limit",
         "max_percent_tmp_floor_setting", 1430, _D + "MAX_PERCENT_TMP_FLOOR_SETTING", _PERCENT, detail=FULL),
    _row("gpu_power_smoothing_floor_setting_min_ratio", "ratio", "Smallest floor setting allowed, of the power limit",
         "min_percent_tmp_floor_setting", 1431, _D + "MIN_PERCENT_TMP_FLOOR_SETTING", _PERCENT, detail=FULL),
    _row("gpu_power_smoothing_circuitry_lifetime_remaining_ratio", "ratio",
         "Share of the power smoothing circuitry's lifetime left", "hw_circuitry_percent_lifetime_remaining", 1432,
         _D + "HW_CIRCUITRY_PERCENT_LIFETIME_REMAINING", _PERCENT),
    _row("gpu_power_smoothing_preset_profiles", "", "Number of preset profiles the GPU offers",
         "max_num_preset_profiles", 1433, _D + "MAX_NUM_PRESET_PROFILES", maximum=255, detail=FULL),
    _row("gpu_power_smoothing_active_preset_profile", "", "Number of the active preset profile",
         "active_preset_profile", 1438, _D + "ACTIVE_PRESET_PROFILE", maximum=255, detail=FULL),
    _row("gpu_power_smoothing_profile_floor_ratio", "ratio", "Total module power floor of the preset profile, of the "
         "power limit", "profile_percent_tmp_floor", 1434, _D + "PROFILE_PERCENT_TMP_FLOOR", _PERCENT,
         variant=_PROFILE, detail=FULL),
    _row("gpu_power_smoothing_profile_ramp_up_watts_per_second", "watts_per_second",
         "Ramp-up rate of the preset profile", "profile_ramp_up_rate", 1435, _D + "PROFILE_RAMP_UP_RATE", _MILLI,
         variant=_PROFILE, detail=FULL),
    _row("gpu_power_smoothing_profile_ramp_down_watts_per_second", "watts_per_second",
         "Ramp-down rate of the preset profile", "profile_ramp_down_rate", 1436, _D + "PROFILE_RAMP_DOWN_RATE", _MILLI,
         variant=_PROFILE, detail=FULL),
    _row("gpu_power_smoothing_profile_ramp_down_hysteresis_seconds", "seconds",
         "Ramp-down hysteresis of the preset profile", "profile_ramp_down_hyst_val", 1437,
         _D + "PROFILE_RAMP_DOWN_HYST_VAL", _MILLI, variant=_PROFILE, detail=FULL),
    _row("gpu_power_smoothing_override_floor_ratio", "ratio", "Administrator's override of the total module power "
         "floor, of the power limit", "admin_override_percent_tmp_floor", 1439,
         _D + "ADMIN_OVERRIDE_PERCENT_TMP_FLOOR", _PERCENT, detail=FULL),
    _row("gpu_power_smoothing_override_ramp_up_watts_per_second", "watts_per_second",
         "Administrator's override of the ramp-up rate", "admin_override_ramp_up_rate", 1440,
         _D + "ADMIN_OVERRIDE_RAMP_UP_RATE", _MILLI, detail=FULL),
    _row("gpu_power_smoothing_override_ramp_down_watts_per_second", "watts_per_second",
         "Administrator's override of the ramp-down rate", "admin_override_ramp_down_rate", 1441,
         _D + "ADMIN_OVERRIDE_RAMP_DOWN_RATE", _MILLI, detail=FULL),
    _row("gpu_power_smoothing_override_ramp_down_hysteresis_seconds", "seconds",
         "Administrator's override of the ramp-down hysteresis", "admin_override_ramp_down_hyst_val", 1442,
         _D + "ADMIN_OVERRIDE_RAMP_DOWN_HYST_VAL", _MILLI, detail=FULL),
)  # fmt: skip
