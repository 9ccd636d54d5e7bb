"""The catalogue's vocabulary: label names, base units and their physical bounds, the vendors' bit
and field tables several rows share, and the HELP text composed from a row."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpu_exporter.catalogue.spec import MetricSpec

#: Labels every per-GPU series carries, in order.
DEVICE_LABELS: tuple[str, ...] = ("gpu", "uuid")
#: Label of the link a per-NVLink series is about, after :data:`DEVICE_LABELS`.
LINK_LABEL = "nvlink"
#: Labels a MIG device's series carry after :data:`DEVICE_LABELS` (uuid stays the parent GPU's).
MIG_LABELS: tuple[str, ...] = ("gpu_instance", "compute_instance", "profile")
#: Labels of ``gpu_info``, in order; values come from the backend's device identity.
INFO_LABELS: tuple[str, ...] = (
    "gpu",
    "uuid",
    "name",
    "pci_bus_id",
    "serial",
    "driver_version",
    "cuda_version",
    "vbios_version",
    "board_part_number",
    "minor_number",
    "mig_mode",
    "brand",
    "compute_capability",
    "pci_device_id",
    "pci_subsystem_id",
    "inforom_image_version",
    "inforom_oem_version",
    "inforom_ecc_version",
    "inforom_power_version",
)
#: Labels of ``gpu_mig_info``, in order.
MIG_INFO_LABELS: tuple[str, ...] = (*DEVICE_LABELS, *MIG_LABELS, "mig_uuid", "name")

#: Base-unit suffixes a metric name may end in (promtool does not check units; a test does).
UNIT_SUFFIXES: tuple[str, ...] = (
    "_bytes",
    "_bytes_per_second",
    "_celsius",
    "_hertz",
    "_joules_total",
    "_ratio",
    "_seconds",
    "_seconds_total",
    "_total",
    "_watts",
    "_watts_per_second",
    "_volts",
    "_info",
)


#: Clock-event reason label → NVML ``nvmlClocksEventReason*`` bit (also DCGM field 112's bit).
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", 0x1),
    ("applications_clocks", 0x2),
    ("power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal", 0x20),
    ("hw_thermal", 0x40),
    ("hw_power_brake", 0x80),
    ("display_clocks", 0x100),
)
#: Violation policy label → DCGM field id and dcgm-exporter name (NVML ``NVML_PERF_POLICY_*``).
VIOLATION_POLICIES: tuple[tuple[str, int, str], ...] = (
    ("power", 240, "DCGM_FI_DEV_POWER_VIOLATION"),
    ("thermal", 241, "DCGM_FI_DEV_THERMAL_VIOLATION"),
    ("sync_boost", 242, "DCGM_FI_DEV_SYNC_BOOST_VIOLATION"),
    ("board_limit", 243, "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION"),
    ("low_utilization", 244, "DCGM_FI_DEV_LOW_UTIL_VIOLATION"),
    ("reliability", 245, "DCGM_FI_DEV_RELIABILITY_VIOLATION"),
)
#: NVLink error type → DCGM's per-link field ids, link 0 to 17 (DCGM numbered links 6-11, 12-14 and 15-17
#: in later blocks than 0-5; NVML's nvmlNvLinkErrorCounter_t DL_CRC_DATA, DL_REPLAY, DL_RECOVERY, DL_CRC_FLIT).
NVLINK_ERROR_FIELDS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("crc_data", (*range(410, 416), *range(457, 463), *range(416, 419), *range(484, 487))),
    ("replay", (*range(420, 426), *range(463, 469), *range(426, 429), *range(487, 490))),
    ("recovery", (*range(430, 436), *range(469, 475), *range(436, 439), *range(491, 494))),
    ("crc_flit", (*range(400, 406), *range(451, 457), *range(406, 409), *range(481, 484))),
)


def _ranges(ids: tuple[int, ...]) -> str:
    """``410-415, 457-462``: runs of consecutive field ids, in the given order."""
    runs: list[list[int]] = []
    for number in ids:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


#: DCGM fields behind each family whose rows come from several fields (for the shared HELP text).
_FAMILY_FIELDS: dict[str, tuple[int, ...]] = {
    "gpu_clock_event_active": (112,),
    "gpu_clock_throttle_seconds_total": tuple(field_id for _, field_id, _ in VIOLATION_POLICIES),
    "gpu_clock_below_target_seconds_total": (246, 247),
    "gpu_clock_hw_slowdown_seconds_total": (1423, 1424),
    # power smoothing's per-profile fields (one row each, labelled with preset profile 0)
    "gpu_power_smoothing_profile_floor_ratio": (1434,),
    "gpu_power_smoothing_profile_ramp_up_watts_per_second": (1435,),
    "gpu_power_smoothing_profile_ramp_down_watts_per_second": (1436,),
    "gpu_power_smoothing_profile_ramp_down_hysteresis_seconds": (1437,),
    "gpu_ecc_errors_total": (310, 311, 312, 313),
    "gpu_ecc_location_errors_total": tuple(range(314, 346)),
    "gpu_remapped_rows_total": (393, 394),
    "gpu_row_remap_banks": tuple(range(385, 390)),
    "gpu_c2c_link_errors_total": (1400, 1401, 1402),
    "gpu_retired_pages_total": (390, 391),
    "gpu_nvswitch_power_watts": (705, 706, 707),
    "gpu_nvswitch_nvlink_errors_total": (784, 785, 786, 787, 788),
    "gpu_nvswitch_last_sxid": (856, 857),
}
#: Per-link DCGM fields behind each per-link family with several rows, by the row's variant value.
_FAMILY_LINK_FIELDS: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {
    "gpu_nvlink_errors_total": NVLINK_ERROR_FIELDS,
}
#: Physical upper bound per base unit; larger values are driver garbage and dropped as invalid.
UNIT_MAXIMA: dict[str, float] = {
    "ratio": 1.0,
    "celsius": 200.0,
    "watts": 10_000.0,
    "volts": 100.0,
    "joules": 1e15,
    "hertz": 1e10,
    "bytes": 1e15,
    "bytes_per_second": 1e12,
    "seconds": 1e12,
}


#: NVML sources (call, selector) the NVML backend reads through ``nvmlDeviceGetFieldValues`` (its field
#: for the value, in the GPU's one field-value call), falling back to the call itself only where the
#: field is unsupported or unknown; NVLink error counters have a field for links 0-11 only, the link
#: state for every link. Held equal to the backend's field table by tests/unit/test_catalogue.py.
READ_AS_FIELD: frozenset[tuple[str, str]] = frozenset(
    {
        ("nvmlDeviceGetPowerUsage", ""), ("nvmlDeviceGetEnforcedPowerLimit", ""),
        ("nvmlDeviceGetPowerManagementDefaultLimit", ""), ("nvmlDeviceGetPowerManagementLimit", ""),
        ("nvmlDeviceGetPowerManagementLimitConstraints", "min"),
        ("nvmlDeviceGetPowerManagementLimitConstraints", "max"), ("nvmlDeviceGetTotalEnergyConsumption", ""),
        ("nvmlDeviceGetPcieReplayCounter", ""), ("nvmlDeviceGetEccMode", "current"),
        ("nvmlDeviceGetEccMode", "pending"), ("nvmlDeviceGetRetiredPagesPendingStatus", ""),
        ("nvmlDeviceGetRetiredPages", "multiple_single_bit"), ("nvmlDeviceGetRetiredPages", "double_bit"),
        ("nvmlDeviceGetNvLinkState", ""),
        *(("nvmlDeviceGetTotalEccErrors", f"{kind}_{counter}")
          for kind in ("corrected", "uncorrected") for counter in ("volatile", "aggregate")),
        *(("nvmlDeviceGetMemoryErrorCounter", f"{kind}_{counter}_{location}")
          for kind in ("corrected", "uncorrected") for counter in ("volatile", "aggregate")
          for location in ("l1_cache", "l2_cache", "device_memory", "register_file", "texture_memory")),
        ("nvmlDeviceGetMemoryErrorCounter", "uncorrected_volatile_cbu"),
        ("nvmlDeviceGetMemoryErrorCounter", "uncorrected_aggregate_cbu"),
        *(("nvmlDeviceGetRemappedRows", what) for what in ("correctable", "uncorrectable", "pending", "failure")),
        *(("nvmlDeviceGetViolationStatus", what)
          for what in ("power", "thermal", "sync_boost", "board_limit", "low_utilization", "reliability",
                       "app_clocks", "base_clocks")),
        *(("nvmlDeviceGetNvLinkErrorCounter", what) for what in ("crc_data", "replay", "recovery", "crc_flit")),
    }
)  # fmt: skip


def _nvml_source(call: str, selector: str, show_selector: bool) -> str:
    """The NVML call the backend makes for a source, as HELP states it."""
    if not show_selector:  # a family of rows shares one HELP: some of its values may have no field
        if any(known == call for known, _selector in READ_AS_FIELD):
            return f"NVML nvmlDeviceGetFieldValues where NVML has a field for the value, else {call}"
        return f"NVML {call}"
    shown = f"{call}({selector})" if selector else call
    if (call, selector) in READ_AS_FIELD:
        return f"NVML nvmlDeviceGetFieldValues, else {shown} where the driver has no field for it"
    return f"NVML {shown}"


def help_text(spec: MetricSpec) -> str:
    """HELP text: the meaning, the unit and the source on each backend (shared by a family's rows)."""
    sources = []
    nvml, dcgm = spec.nvml, spec.dcgm
    if nvml is not None:
        sources.append(_nvml_source(nvml.call, nvml.selector, not spec.variant))
    if dcgm is not None and dcgm.call:
        sources.append(f"DCGM {dcgm.call}")
    elif dcgm is not None and dcgm.links and not spec.variant:
        sources.append(f"DCGM fields {_ranges(dcgm.links)} (links 0-{len(dcgm.links) - 1})")
    elif dcgm is not None and not spec.variant:
        sources.append(f"DCGM field {dcgm.field_id}")
    elif dcgm is not None and spec.name in _FAMILY_LINK_FIELDS:
        per_type = (f"{_ranges(ids)} ({label})" for label, ids in _FAMILY_LINK_FIELDS[spec.name])
        sources.append("DCGM per-link fields " + "; ".join(per_type))
    elif dcgm is not None:
        sources.append("DCGM fields " + ", ".join(str(field) for field in _FAMILY_FIELDS.get(spec.name, ())))
    if spec.derive is not None:
        sources.append(spec.derive.describe())
    unit = f" ({spec.unit})" if spec.unit else ""
    return f"{spec.description}{unit}. Source: {'; '.join(sources)}."
