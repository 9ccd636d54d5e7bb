"""How each catalogue NVML source is read: one reader per pynvml call, returning raw NVML units.

Struct readers serve every selector of a call from one NVML call per device and cycle; argument
readers make one NVML call per selector (a clock type, a violation policy, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from ctypes import byref
from typing import Any

import pynvml

from gpu_exporter.backends.nvml.gpm import CALL as _GPM_CALL
from gpu_exporter.backends.nvml.gpm import LINK_SELECTORS as GPM_LINK_SELECTORS
from gpu_exporter.backends.nvml.gpm import SELECTORS as GPM_SELECTORS
from gpu_exporter.backends.nvml.link_fields import ALL_LINKS, BER_FIELD_IDS, C2C_FIELD_IDS, NVLINK5_FIELD_IDS
from gpu_exporter.backends.nvml.memory_flag import CALL as _UNREPAIRABLE_CALL
from gpu_exporter.backends.nvml.memory_flag import unrepairable_memory as _unrepairable_memory
from gpu_exporter.backends.nvml.vgpu_license import CALL as _VGPU_LICENSE_CALL
from gpu_exporter.backends.nvml.vgpu_license import vgpu_licensed as _vgpu_licensed
from gpu_exporter.catalogue import CLOCK_EVENT_REASONS

_THRESHOLDS = {
    "slowdown": pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
    "shutdown": pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
    "max_operating": pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX,
    "memory_max_operating": pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX,
}
_CLOCKS = {"sm": pynvml.NVML_CLOCK_SM, "memory": pynvml.NVML_CLOCK_MEM, "video": pynvml.NVML_CLOCK_VIDEO}
_APP_CLOCKS = {"sm": pynvml.NVML_CLOCK_SM, "memory": pynvml.NVML_CLOCK_MEM}
_PCIE_COUNTERS = {"tx": pynvml.NVML_PCIE_UTIL_TX_BYTES, "rx": pynvml.NVML_PCIE_UTIL_RX_BYTES}
# Values NVML offers only as fields (no call of their own): °C, mW.
_FIELD_IDS = {"memory_temperature": pynvml.NVML_FI_DEV_MEMORY_TEMP, "power_instant": pynvml.NVML_FI_DEV_POWER_INSTANT}
# More field-only values: HW slowdown times (ns), PCIe correctable errors (count) and bytes, the recovery action
# (nvmlDeviceGpuRecoveryAction_t), power smoothing settings (W, percent, mW/s, ms; the per-profile ones
# with scopeId 0, i.e. preset profile 0, as DCGM reads them).
_FIELD_IDS.update(
    {
        "hw_thermal_slowdown": pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
        "hw_power_brake_slowdown": pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
        "pcie_correctable_errors": pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS,
        "pcie_tx_bytes": pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
        "pcie_rx_bytes": pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
        "recovery_action": pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
        **{
            f"power_smoothing_{name.lower()}": getattr(pynvml, f"NVML_FI_PWR_SMOOTHING_{name}")
            for name in (
                "ENABLED", "PRIV_LVL", "IMM_RAMP_DOWN_ENABLED", "APPLIED_TMP_CEIL", "APPLIED_TMP_FLOOR",
                "MAX_PERCENT_TMP_FLOOR_SETTING", "MIN_PERCENT_TMP_FLOOR_SETTING",
                "HW_CIRCUITRY_PERCENT_LIFETIME_REMAINING", "MAX_NUM_PRESET_PROFILES", "PROFILE_PERCENT_TMP_FLOOR",
                "PROFILE_RAMP_UP_RATE", "PROFILE_RAMP_DOWN_RATE", "PROFILE_RAMP_DOWN_HYST_VAL",
                "ACTIVE_PRESET_PROFILE", "ADMIN_OVERRIDE_PERCENT_TMP_FLOOR", "ADMIN_OVERRIDE_RAMP_UP_RATE",
                "ADMIN_OVERRIDE_RAMP_DOWN_RATE", "ADMIN_OVERRIDE_RAMP_DOWN_HYST_VAL",
            )
        },
    }
)  # fmt: skip
_FIELD_IDS.update(C2C_FIELD_IDS)  # the C2C link (scopeId 0) and the NVLink data ECC total
_FIELD_IDS.update(BER_FIELD_IDS)  # NVLink5 bit error rates, encoded (scopeId UINT_MAX)
#: The scopeId of a field-only value where it is not 0, by selector.
FIELD_SCOPES: dict[str, int] = dict.fromkeys(BER_FIELD_IDS, ALL_LINKS)
#: Field-only values, by selector of the ``nvmlDeviceGetFieldValues`` source (also read in the batch).
FIELD_ONLY: dict[str, int] = _FIELD_IDS
# Per-link field values (scopeId = link): cumulative KiB since the driver loaded.
_LINK_FIELD_IDS = {
    "nvlink_tx": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    "nvlink_rx": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    "nvlink_state": pynvml.NVML_FI_DEV_NVLINK_GET_STATE,  # the raw state 0-3 (gpu_nvlink_state)
    **NVLINK5_FIELD_IDS,  # NVLink5 port counters and FEC history bins: counts, bytes
}
_LINK_ERRORS = {
    "crc_data": pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
    "replay": pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    "recovery": pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
    "crc_flit": pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
}
MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
_VIOLATIONS = {
    "power": pynvml.NVML_PERF_POLICY_POWER,
    "thermal": pynvml.NVML_PERF_POLICY_THERMAL,
    "sync_boost": pynvml.NVML_PERF_POLICY_SYNC_BOOST,
    "board_limit": pynvml.NVML_PERF_POLICY_BOARD_LIMIT,
    "low_utilization": pynvml.NVML_PERF_POLICY_LOW_UTILIZATION,
    "reliability": pynvml.NVML_PERF_POLICY_RELIABILITY,
    "app_clocks": pynvml.NVML_PERF_POLICY_TOTAL_APP_CLOCKS,
    "base_clocks": pynvml.NVML_PERF_POLICY_TOTAL_BASE_CLOCKS,
}
_ECC = {
    f"{kind}_{counter}": (error_type, counter_type)
    for kind, error_type in (
        ("corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
        ("uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
    )
    for counter, counter_type in (("volatile", pynvml.NVML_VOLATILE_ECC), ("aggregate", pynvml.NVML_AGGREGATE_ECC))
}
# nvmlDeviceGetMemoryErrorCounter: selector "<type>_<counter>_<location>" → (error type, counter type, location).
_ECC_LOCATIONS = {
    f"{selector}_{location}": (*types, where)
    for selector, types in _ECC.items()
    for location, where in (
        ("l1_cache", pynvml.NVML_MEMORY_LOCATION_L1_CACHE),
        ("l2_cache", pynvml.NVML_MEMORY_LOCATION_L2_CACHE),
        ("device_memory", pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY),
        ("register_file", pynvml.NVML_MEMORY_LOCATION_REGISTER_FILE),
        ("texture_memory", pynvml.NVML_MEMORY_LOCATION_TEXTURE_MEMORY),
        ("shared_memory", pynvml.NVML_MEMORY_LOCATION_TEXTURE_SHM),
        ("cbu", pynvml.NVML_MEMORY_LOCATION_CBU),
        ("sram", pynvml.NVML_MEMORY_LOCATION_SRAM),
    )
}
_ROW_REMAP_AVAILABILITY = ("max", "high", "partial", "low", "none")
_RETIREMENT_CAUSES = {
    "multiple_single_bit": pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    "double_bit": pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
}
_PSTATE_UNKNOWN = 32
#: Values reduced from the driver's sample buffers by the backend (samples.py's REDUCED).
_SAMPLE_REDUCTIONS = ("total_power_max", "processor_clk_busy_min")

# NVML error codes → the ``kind`` label of gpu_exporter_sample_errors_total.
ERROR_KINDS: dict[int, str] = {
    getattr(pynvml, name): name.removeprefix("NVML_ERROR_").lower()
    for name in dir(pynvml)
    if name.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, name), int)
}

Handle = Any  # a ctypes pointer owned by pynvml
Raw = dict[str, float | None]


def text(value: object) -> str:
    """pynvml returns identity strings as str or bytes depending on the call and version."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


VALUE_MEMBERS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def field_value(entry: Any) -> float:
    """Decode one ``nvmlFieldValue_t`` union by its ``valueType``; raise its ``nvmlReturn``."""
    status = entry.nvmlReturn
    if status != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(status)
    return float(getattr(entry.value, VALUE_MEMBERS.get(entry.valueType, "ullVal")))


def _memory(handle: Handle) -> Raw:
    """``nvmlDeviceGetMemoryInfo_v2`` (bytes; ``used`` excludes reserved), else v1 without reserved."""
    try:
        info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        return {"total": info.total, "used": info.used, "free": info.free, "reserved": info.reserved}
    except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_ArgumentVersionMismatch):
        # Drivers before R510: v1 only, whose ``used`` includes the reserved memory.
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return {"total": info.total, "used": info.used, "free": info.free, "reserved": None}


def _bar1(handle: Handle) -> Raw:
    """``nvmlDeviceGetBAR1MemoryInfo``, bytes."""
    info = pynvml.nvmlDeviceGetBAR1MemoryInfo(handle)
    return {"total": info.bar1Total, "used": info.bar1Used, "free": info.bar1Free}


def _utilization(handle: Handle) -> Raw:
    rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
    return {"gpu": rates.gpu, "memory": rates.memory}


def _pstate(handle: Handle) -> Raw:
    state = pynvml.nvmlDeviceGetPerformanceState(handle)
    return {"": None if state == _PSTATE_UNKNOWN else state}


def _clock_events(handle: Handle) -> Raw:
    """``nvmlDeviceGetCurrentClocksEventReasons`` (driver ≥ 535), else the older ThrottleReasons name."""
    try:
        mask = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    except pynvml.NVMLError_FunctionNotFound:
        mask = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
    return {reason: 1 if int(mask) & bit else 0 for reason, bit in CLOCK_EVENT_REASONS}


def _ecc_mode(handle: Handle) -> Raw:
    """``nvmlDeviceGetEccMode``: the current mode and the one after the next reboot, 0 or 1."""
    current, pending = pynvml.nvmlDeviceGetEccMode(handle)
    return {"current": current, "pending": pending}


def _power_constraints(handle: Handle) -> Raw:
    """``nvmlDeviceGetPowerManagementLimitConstraints``: the lowest and highest limit, mW."""
    low, high = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
    return {"min": low, "max": high}


def _mig_mode(handle: Handle) -> Raw:
    """``nvmlDeviceGetMigMode``: the current mode, 0 or 1 (the pending one is not exported)."""
    current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    return {"current": current}


def _remapped_rows(handle: Handle) -> Raw:
    correctable, uncorrectable, pending, failure = pynvml.nvmlDeviceGetRemappedRows(handle)
    return {"correctable": correctable, "uncorrectable": uncorrectable, "pending": pending, "failure": failure}


def _row_remapper_histogram(handle: Handle) -> Raw:
    """``nvmlDeviceGetRowRemapperHistogram``: memory banks by spare rows left (max, high, partial, low, none)."""
    values = pynvml.nvmlDeviceGetRowRemapperHistogram(handle)
    return {name: getattr(values, name) for name in _ROW_REMAP_AVAILABILITY}


def _fabric(handle: Handle) -> Raw:
    """``nvmlDeviceGetGpuFabricInfoV`` (v3 struct): the registration state in DCGM's encoding of
    field 170 (1 not started, 2 in progress, 3 completed, 4 completed with an error in ``status``),
    the clique id, the health mask and summary. A GPU outside any fabric (state NOT_SUPPORTED) has
    none of them; a summary of 0 (not supported) is absent."""
    info: Any = pynvml.c_nvmlGpuFabricInfo_v3_t()
    try:
        pynvml.nvmlDeviceGetGpuFabricInfoV(handle, byref(info))
    except pynvml.NVMLError_ArgumentVersionMismatch:  # drivers before the v3 struct: no summary
        info = pynvml.c_nvmlGpuFabricInfo_v2_t()
        pynvml.nvmlDeviceGetGpuFabricInfoV(handle, byref(info))
    if info.state == pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
        return {"state": None, "clique_id": None, "health_mask": None, "health_summary": None}
    failed = info.state == pynvml.NVML_GPU_FABRIC_STATE_COMPLETED and info.status != pynvml.NVML_SUCCESS
    return {
        "state": 4 if failed else info.state,
        "clique_id": info.cliqueId,
        "health_mask": info.healthMask,
        "health_summary": getattr(info, "healthSummary", 0) or None,
    }


def _sram_status(handle: Handle) -> Raw:
    """``nvmlDeviceGetSramEccErrorStatus`` (v1 struct; Ampere and later, root only): ``bThresholdExceeded``,
    1 when the SRAM errors passed the threshold of the GPU's field diagnostics (DCGM field 346 reads it)."""
    status: Any = pynvml.c_nvmlEccSramErrorStatus_v1_t()
    pynvml.nvmlDeviceGetSramEccErrorStatus(handle, byref(status))
    return {"threshold_exceeded": 1 if status.bThresholdExceeded else 0}


def _inforom_valid(handle: Handle) -> Raw:
    """``nvmlDeviceValidateInforom``: 1 when the inforom's checksums verify, 0 when NVML says it is corrupted."""
    try:
        pynvml.nvmlDeviceValidateInforom(handle)
    except pynvml.NVMLError_CorruptedInforom:
        return {"": 0}
    return {"": 1}


def _single(call: Callable[[Handle], Any]) -> Callable[[Handle], Raw]:
    return lambda handle: {"": call(handle)}


def _first(call: Callable[[Handle], Sequence[Any]]) -> Callable[[Handle], Raw]:
    """Encoder/decoder utilisation return ``[percent, sampling period µs]``."""
    return lambda handle: {"": call(handle)[0]}


# Calls that return several values at once: read once per device per cycle, every selector served.
STRUCT_READERS: dict[str, Callable[[Handle], Raw]] = {
    "nvmlDeviceGetMemoryInfo": _memory,
    "nvmlDeviceGetBAR1MemoryInfo": _bar1,
    "nvmlDeviceGetUtilizationRates": _utilization,
    "nvmlDeviceGetEncoderUtilization": _first(pynvml.nvmlDeviceGetEncoderUtilization),
    "nvmlDeviceGetDecoderUtilization": _first(pynvml.nvmlDeviceGetDecoderUtilization),
    "nvmlDeviceGetFanSpeed": _single(pynvml.nvmlDeviceGetFanSpeed),
    "nvmlDeviceGetMarginTemperature": _single(pynvml.nvmlDeviceGetMarginTemperature),  # °C, signed
    "nvmlDeviceGetPowerUsage": _single(pynvml.nvmlDeviceGetPowerUsage),
    "nvmlDeviceGetEnforcedPowerLimit": _single(pynvml.nvmlDeviceGetEnforcedPowerLimit),
    "nvmlDeviceGetPowerManagementDefaultLimit": _single(pynvml.nvmlDeviceGetPowerManagementDefaultLimit),
    "nvmlDeviceGetPowerManagementLimit": _single(pynvml.nvmlDeviceGetPowerManagementLimit),
    "nvmlDeviceGetPowerManagementLimitConstraints": _power_constraints,
    "nvmlDeviceGetPersistenceMode": _single(pynvml.nvmlDeviceGetPersistenceMode),
    # [current, default] setting, 0 or 1; NOT_SUPPORTED on most data-centre GPUs since Volta.
    "nvmlDeviceGetAutoBoostedClocksEnabled": lambda handle: {
        "": pynvml.nvmlDeviceGetAutoBoostedClocksEnabled(handle)[0]
    },
    "nvmlDeviceGetComputeMode": _single(pynvml.nvmlDeviceGetComputeMode),
    "nvmlDeviceGetMigMode": _mig_mode,
    "nvmlDeviceGetVirtualizationMode": _single(pynvml.nvmlDeviceGetVirtualizationMode),
    "nvmlDeviceGetTotalEnergyConsumption": _single(pynvml.nvmlDeviceGetTotalEnergyConsumption),
    "nvmlDeviceGetPerformanceState": _pstate,
    "nvmlDeviceGetCurrPcieLinkGeneration": _single(pynvml.nvmlDeviceGetCurrPcieLinkGeneration),
    "nvmlDeviceGetMaxPcieLinkGeneration": _single(pynvml.nvmlDeviceGetMaxPcieLinkGeneration),
    "nvmlDeviceGetCurrPcieLinkWidth": _single(pynvml.nvmlDeviceGetCurrPcieLinkWidth),
    "nvmlDeviceGetMaxPcieLinkWidth": _single(pynvml.nvmlDeviceGetMaxPcieLinkWidth),
    "nvmlDeviceGetPcieReplayCounter": _single(pynvml.nvmlDeviceGetPcieReplayCounter),
    "nvmlDeviceGetCurrentClocksEventReasons": _clock_events,
    "nvmlDeviceGetEccMode": _ecc_mode,
    "nvmlDeviceGetRemappedRows": _remapped_rows,
    "nvmlDeviceGetRowRemapperHistogram": _row_remapper_histogram,
    _UNREPAIRABLE_CALL: _unrepairable_memory,  # checks which struct layout the driver wrote
    "nvmlDeviceGetInforomConfigurationChecksum": _single(pynvml.nvmlDeviceGetInforomConfigurationChecksum),
    "nvmlDeviceValidateInforom": _inforom_valid,
    "nvmlDeviceGetSramEccErrorStatus": _sram_status,
    "nvmlDeviceGetGpuFabricInfoV": _fabric,
    _VGPU_LICENSE_CALL: _vgpu_licensed,  # DCGM 526's rule: 0 on bare metal, else the vGPU feature's state
    "nvmlDeviceGetRetiredPagesPendingStatus": _single(pynvml.nvmlDeviceGetRetiredPagesPendingStatus),
    # The _v3 symbol; on drivers without it pynvml raises NVMLLibraryMismatchError (handled as missing).
    "nvmlDeviceGetComputeRunningProcesses": lambda handle: {
        "": len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    },
}

# Calls that take the selector as an argument: one NVML call per (call, selector).
ARG_READERS: dict[str, Callable[[Handle, str], float]] = {
    "nvmlDeviceGetTemperature": lambda h, _s: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
    "nvmlDeviceGetTemperatureThreshold": lambda h, s: pynvml.nvmlDeviceGetTemperatureThreshold(h, _THRESHOLDS[s]),
    "nvmlDeviceGetFieldValues": lambda h, s: field_value(
        pynvml.nvmlDeviceGetFieldValues(h, [(_FIELD_IDS[s], FIELD_SCOPES.get(s, 0))])[0]
    ),
    "nvmlDeviceGetClockInfo": lambda h, s: pynvml.nvmlDeviceGetClockInfo(h, _CLOCKS[s]),
    "nvmlDeviceGetMaxClockInfo": lambda h, s: pynvml.nvmlDeviceGetMaxClockInfo(h, _CLOCKS[s]),
    "nvmlDeviceGetApplicationsClock": lambda h, s: pynvml.nvmlDeviceGetApplicationsClock(h, _APP_CLOCKS[s]),
    "nvmlDeviceGetPcieThroughput": lambda h, s: pynvml.nvmlDeviceGetPcieThroughput(h, _PCIE_COUNTERS[s]),
    "nvmlDeviceGetViolationStatus": lambda h, s: pynvml.nvmlDeviceGetViolationStatus(h, _VIOLATIONS[s]).violationTime,
    "nvmlDeviceGetTotalEccErrors": lambda h, s: pynvml.nvmlDeviceGetTotalEccErrors(h, *_ECC[s]),
    "nvmlDeviceGetMemoryErrorCounter": lambda h, s: pynvml.nvmlDeviceGetMemoryErrorCounter(h, *_ECC_LOCATIONS[s]),
    "nvmlDeviceGetRetiredPages": lambda h, s: len(pynvml.nvmlDeviceGetRetiredPages(h, _RETIREMENT_CAUSES[s])),
}


# Per-NVLink calls: (handle, link, selector) → raw value.
LINK_READERS: dict[str, Callable[[Handle, int, str], float]] = {
    "nvmlDeviceGetNvLinkState": lambda h, link, _s: pynvml.nvmlDeviceGetNvLinkState(h, link),
    "nvmlDeviceGetFieldValues": lambda h, link, s: field_value(
        pynvml.nvmlDeviceGetFieldValues(h, [(_LINK_FIELD_IDS[s], link)])[0]
    ),
    "nvmlDeviceGetNvLinkErrorCounter": lambda h, link, s: pynvml.nvmlDeviceGetNvLinkErrorCounter(
        h, link, _LINK_ERRORS[s]
    ),
}


def supported_link_calls() -> frozenset[tuple[str, str]]:
    """Every (call, selector) this backend can read per NVLink."""
    selectors = {
        "nvmlDeviceGetNvLinkState": ("",),
        "nvmlDeviceGetFieldValues": tuple(_LINK_FIELD_IDS),
        "nvmlDeviceGetNvLinkErrorCounter": tuple(_LINK_ERRORS),
        "nvmlDeviceReadPRMCounters_v1": ("transmit_wait",),  # one call per GPU (prm.py, read by the backend)
        _GPM_CALL: GPM_LINK_SELECTORS,  # from the GPU's one GPM sample of the read (gpm.py)
    }
    return frozenset((call, selector) for call, names in selectors.items() for selector in names)


def supported_calls() -> frozenset[tuple[str, str]]:
    """Every (call, selector) this backend can read; a test checks the catalogue against it."""
    selectors: dict[str, tuple[str, ...]] = {
        "nvmlDeviceGetTemperature": ("gpu",),
        "nvmlDeviceGetTemperatureThreshold": tuple(_THRESHOLDS),
        "nvmlDeviceGetFieldValues": tuple(_FIELD_IDS),
        "nvmlDeviceGetClockInfo": tuple(_CLOCKS),
        "nvmlDeviceGetMaxClockInfo": tuple(_CLOCKS),
        "nvmlDeviceGetApplicationsClock": tuple(_APP_CLOCKS),
        "nvmlDeviceGetPowerManagementLimitConstraints": ("min", "max"),
        "nvmlDeviceGetMigMode": ("current",),
        "nvmlDeviceGetPcieThroughput": tuple(_PCIE_COUNTERS),
        "nvmlDeviceGetMemoryInfo": ("total", "used", "free", "reserved"),
        "nvmlDeviceGetBAR1MemoryInfo": ("total", "used", "free"),
        "nvmlDeviceGetUtilizationRates": ("gpu", "memory"),
        "nvmlDeviceGetCurrentClocksEventReasons": tuple(reason for reason, _ in CLOCK_EVENT_REASONS),
        "nvmlDeviceGetViolationStatus": tuple(_VIOLATIONS),
        "nvmlDeviceGetEccMode": ("current", "pending"),
        "nvmlDeviceGetTotalEccErrors": tuple(_ECC),
        "nvmlDeviceGetRemappedRows": ("correctable", "uncorrectable", "pending", "failure"),
        "nvmlDeviceGetRowRemapperHistogram": _ROW_REMAP_AVAILABILITY,
        "nvmlDeviceGetSramEccErrorStatus": ("threshold_exceeded",),
        "nvmlDeviceGetMemoryErrorCounter": tuple(_ECC_LOCATIONS),
        "nvmlDeviceGetRetiredPages": tuple(_RETIREMENT_CAUSES),
        "nvmlDeviceGetGpuFabricInfoV": ("state", "clique_id", "health_mask", "health_summary"),
    }
    gpm = frozenset((_GPM_CALL, selector) for selector in GPM_SELECTORS)  # one sample per entity (gpm.py)
    gpm |= {("nvmlDeviceGetSamples", selector) for selector in _SAMPLE_REDUCTIONS}  # from the buffers (samples.py)
    return gpm | frozenset(
        (call, selector) for call in (*STRUCT_READERS, *ARG_READERS) for selector in selectors.get(call, ("",))
    )
