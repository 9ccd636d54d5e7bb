"""Field values NVML offers only through ``nvmlDeviceGetFieldValues`` (no call of their own): the HW
slowdown times (ns), PCIe correctable errors and bytes, the GPU recovery action and power smoothing's settings.
Each reads one ``gpuN`` key, the same as the C fake's (SCENARIO.md in this package, "Fields without a call"); a
missing key is ``NOT_SUPPORTED``. The per-profile power smoothing fields (260-263) take the preset
profile as scopeId: ``power_smoothing.profile.P.<key>``; other fields ignore the scopeId.

Field ids are ``NVML_FI_*`` of ``nvml.h``.
"""

from __future__ import annotations

from gpu_exporter.simulate import errors
from gpu_exporter.simulate.call import Call

DBL, UINT, ULL = 0, 1, 3  # NVML_VALUE_TYPE_DOUBLE, _UNSIGNED_INT, _UNSIGNED_LONG_LONG

#: field id → (key, value type); per-profile keys are the part after ``power_smoothing.profile.P.``
ONLY_FIELDS: dict[int, tuple[str, int]] = {
    270: ("slowdown.hw_thermal", ULL),  # CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN
    271: ("slowdown.hw_power_brake", ULL),  # CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN
    173: ("pcie.correctable_errors", ULL),  # PCIE_COUNT_CORRECTABLE_ERRORS
    197: ("pcie.tx_bytes", ULL),  # PCIE_COUNT_TX_BYTES
    198: ("pcie.rx_bytes", ULL),  # PCIE_COUNT_RX_BYTES
    230: ("recovery_action", UINT),  # GET_GPU_RECOVERY_ACTION
    251: ("power_smoothing.enabled", UINT),
    252: ("power_smoothing.privilege_level", UINT),
    253: ("power_smoothing.immediate_ramp_down", UINT),
    254: ("power_smoothing.applied_ceiling", DBL),  # W
    255: ("power_smoothing.applied_floor", DBL),  # W
    256: ("power_smoothing.max_floor_percent", DBL),
    257: ("power_smoothing.min_floor_percent", DBL),
    258: ("power_smoothing.lifetime_remaining_percent", DBL),
    259: ("power_smoothing.preset_profiles", UINT),
    264: ("power_smoothing.active_profile", UINT),
    265: ("power_smoothing.override.floor_percent", DBL),
    266: ("power_smoothing.override.ramp_up", DBL),  # mW/s
    267: ("power_smoothing.override.ramp_down", DBL),  # mW/s
    268: ("power_smoothing.override.hysteresis", UINT),  # ms
}
PROFILE_FIELDS: dict[int, tuple[str, int]] = {
    260: ("floor_percent", DBL),
    261: ("ramp_up", DBL),  # mW/s
    262: ("ramp_down", DBL),  # mW/s
    263: ("hysteresis", UINT),  # ms
}


def only_value(c: Call, field_id: int, scope: int) -> tuple[int, int, float] | None:
    """(return code, value type, value) of a field-only entry; None when ``field_id`` is not one."""
    if field_id in PROFILE_FIELDS:
        suffix, kind = PROFILE_FIELDS[field_id]
        key = f"power_smoothing.profile.{scope}.{suffix}"
    elif field_id in ONLY_FIELDS:
        key, kind = ONLY_FIELDS[field_id]
    else:
        return None
    value: float | None = c.f64(key) if kind == DBL else c.u64(key)
    if value is None:
        return errors.NOT_SUPPORTED, ULL, 0
    return errors.SUCCESS, kind, value
