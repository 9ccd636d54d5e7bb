"""The catalogue: one declarative table of every metric gpu-exporter exports about GPUs.

Each :class:`MetricSpec` says what the metric means (name, type, unit, help), which collector owns
it, where each backend reads it (NVML call and selector, DCGM field id) and the factor that turns
the vendor's raw unit into the metric's base unit. Backends, the sampler, the exposition, the
README's metric table and the tests all read this table; nothing else names a metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

Kind = Literal["gauge", "counter"]

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
    "_seconds_total",
    "_total",
    "_watts",
    "_volts",
    "_info",
)

# Scale factors are exact fractions so that 612345 mW becomes 612.345 W, not 612.3450000000001.
ONE = Fraction(1)
KIB = Fraction(1024)
MIB = Fraction(1024 * 1024)


@dataclass(frozen=True)
class NvmlSource:
    """Where the NVML backend reads a value.

    ``call`` is the pynvml function (the C symbol it resolves may carry a ``_vN`` suffix);
    ``selector`` picks one value of a call that returns several (a struct field or an argument
    such as the clock type), empty for calls that return one number. ``scale`` multiplies the raw
    NVML value into the metric's base unit.
    """

    call: str
    selector: str = ""
    scale: Fraction = ONE


@dataclass(frozen=True)
class DcgmSource:
    """Where the DCGM backend reads a value: a numeric field id (names change between DCGM
    releases, numbers do not) and the factor from DCGM's unit to the base unit. A non-zero ``bit``
    reads one flag of a bitmask field as 0 or 1. A per-link row names one field per link instead
    (``links[n]`` is link n's field; ``field_id`` is link 0's). A ``call`` row is not a field at
    all: the value comes from that DCGM call (``field_id`` is 0)."""

    field_id: int
    scale: Fraction = ONE
    bit: int = 0
    links: tuple[int, ...] = ()
    call: str = ""

    @property
    def fields(self) -> tuple[int, ...]:
        """Every field id this source reads (none for a ``call`` source)."""
        if self.call:
            return ()
        return self.links or (self.field_id,)


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric about a GPU (or MIG device).

    ``unit`` is the base unit, also the name's suffix. ``collector`` is the ``--collector.NAME``
    that enables it. ``mig`` marks metrics NVML reports per MIG device. ``every`` samples an
    expensive call only every Nth cycle (the last value is kept in between). ``derived_from`` names
    the gauge a counter integrates over time instead of reading a vendor value. ``compat_name`` and
    ``compat_scale`` render the same sample under dcgm-exporter's name and unit. ``variant`` gives
    the extra labels of one series of a family that several rows share (e.g. ``reason``).
    ``maximum`` is the physical bound in base units above which a value is dropped as invalid.
    ``per_link`` rows are read once per NVLink and carry an ``nvlink`` label. ``nvswitch`` rows
    are about an NVSwitch (label ``nvswitch``) rather than a GPU; with ``per_link`` they are about
    one of its ports.
    """

    name: str
    kind: Kind
    unit: str
    description: str
    collector: str
    nvml: NvmlSource | None
    dcgm: DcgmSource | None
    compat_name: str | None = None
    compat_scale: Fraction = ONE
    mig: bool = False
    every: int = 1
    derived_from: str | None = None
    variant: tuple[tuple[str, str], ...] = ()
    maximum: float | None = None
    per_link: bool = False
    nvswitch: bool = False

    @property
    def key(self) -> str:
        """Unique key of this row: the name, plus the variant labels when the family has several rows."""
        if not self.variant:
            return self.name
        return self.name + "{" + ",".join(f"{label}={value}" for label, value in self.variant) + "}"

    @property
    def help(self) -> str:
        """HELP text: the meaning, the unit and the source on each backend (shared by a family's rows)."""
        sources = []
        if self.nvml is not None:
            selector = f"({self.nvml.selector})" if self.nvml.selector and not self.variant else ""
            sources.append(f"NVML {self.nvml.call}{selector}")
        if self.dcgm is not None and self.dcgm.call:
            sources.append(f"DCGM {self.dcgm.call}")
        elif self.dcgm is not None and self.dcgm.links and not self.variant:
            sources.append(f"DCGM fields {_ranges(self.dcgm.links)} (links 0-{len(self.dcgm.links) - 1})")
        elif self.dcgm is not None and not self.variant:
            sources.append(f"DCGM field {self.dcgm.field_id}")
        elif self.dcgm is not None and self.name in _FAMILY_LINK_FIELDS:
            per_type = (f"{_ranges(ids)} ({label})" for label, ids in _FAMILY_LINK_FIELDS[self.name])
            sources.append("DCGM per-link fields " + "; ".join(per_type))
        elif self.dcgm is not None:
            sources.append("DCGM fields " + ", ".join(str(field) for field in _FAMILY_FIELDS.get(self.name, ())))
        if self.derived_from is not None:
            sources.append(f"integrated from {self.derived_from} at every sample")
        unit = f" ({self.unit})" if self.unit else ""
        return f"{self.description}{unit}. Source: {'; '.join(sources)}."


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
#: in later blocks than 0-5; NVML's nvmlNvLinkErrorCounter_t DL_CRC_DATA, DL_REPLAY, DL_RECOVERY).
NVLINK_ERROR_FIELDS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("crc_data", (*range(410, 416), *range(457, 463), *range(416, 419), *range(484, 487))),
    ("replay", (*range(420, 426), *range(463, 469), *range(426, 429), *range(487, 490))),
    ("recovery", (*range(430, 436), *range(469, 475), *range(436, 439), *range(491, 494))),
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
    "gpu_ecc_errors_total": (310, 311, 312, 313),
    "gpu_remapped_rows_total": (393, 394),
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


def _gauge(
    name: str,
    unit: str,
    description: str,
    collector: str,
    nvml: NvmlSource | None,
    dcgm: DcgmSource | None,
    compat: str | None = None,
    compat_scale: Fraction = ONE,
    *,
    mig: bool = False,
    every: int = 1,
    variant: tuple[tuple[str, str], ...] = (),
    maximum: float | None = None,
) -> MetricSpec:
    return MetricSpec(
        name, "gauge", unit, description, collector, nvml, dcgm, compat, compat_scale, mig, every,
        variant=variant, maximum=maximum,
    )  # fmt: skip


def _counter(
    name: str,
    unit: str,
    description: str,
    collector: str,
    nvml: NvmlSource | None,
    dcgm: DcgmSource | None,
    compat: str | None = None,
    compat_scale: Fraction = ONE,
    *,
    derived_from: str | None = None,
    variant: tuple[tuple[str, str], ...] = (),
    maximum: float | None = None,
) -> MetricSpec:
    return MetricSpec(
        name, "counter", unit, description, collector, nvml, dcgm, compat, compat_scale,
        derived_from=derived_from, variant=variant, maximum=maximum,
    )  # fmt: skip


#: Cadence of near-static values (limits, thresholds, maximum clocks and link widths, ECC mode), which
#: change only with an admin action or a driver reload: read every 60th cycle, about once a minute.
STATIC = 60
_PERCENT = Fraction(1, 100)
_MILLI = Fraction(1, 1000)
_MHZ = Fraction(10**6)

METRICS: tuple[MetricSpec, ...] = (
    # utilization
    _gauge(
        "gpu_utilization_ratio", "ratio",
        "Fraction of the last sample period during which one or more kernels ran on the GPU", "utilization",
        NvmlSource("nvmlDeviceGetUtilizationRates", "gpu", _PERCENT), DcgmSource(203, _PERCENT),
        "DCGM_FI_DEV_GPU_UTIL", Fraction(100),
    ),
    _counter(
        "gpu_utilization_seconds_total", "seconds",
        "Busy time: gpu_utilization_ratio integrated over the time between samples, so rate() gives the true "
        "average utilization over any window", "utilization",
        None, None, derived_from="gpu_utilization_ratio",
    ),
    _gauge(
        "gpu_compute_processes", "", "Compute processes (CUDA contexts) running on the GPU", "utilization",
        NvmlSource("nvmlDeviceGetComputeRunningProcesses"), None,
    ),
    _counter(
        "gpu_idle_while_allocated_seconds_total", "seconds",
        "Time the GPU sat nearly idle (utilization below 5%) while at least one compute process held it: "
        "an input pipeline that cannot keep up shows as this rising while gpu_utilization_seconds_total also "
        "rises", "utilization",
        None, None, derived_from="gpu_utilization_ratio and gpu_compute_processes",
    ),
    _gauge(
        "gpu_memory_copy_utilization_ratio", "ratio",
        "Fraction of the last sample period during which device memory was being read or written", "utilization",
        NvmlSource("nvmlDeviceGetUtilizationRates", "memory", _PERCENT), DcgmSource(204, _PERCENT),
        "DCGM_FI_DEV_MEM_COPY_UTIL", Fraction(100),
    ),
    _gauge(
        "gpu_encoder_utilization_ratio", "ratio", "Video encoder utilization", "utilization",
        NvmlSource("nvmlDeviceGetEncoderUtilization", "", _PERCENT), DcgmSource(206, _PERCENT),
        "DCGM_FI_DEV_ENC_UTIL", Fraction(100),
    ),
    _gauge(
        "gpu_decoder_utilization_ratio", "ratio", "Video decoder utilization", "utilization",
        NvmlSource("nvmlDeviceGetDecoderUtilization", "", _PERCENT), DcgmSource(207, _PERCENT),
        "DCGM_FI_DEV_DEC_UTIL", Fraction(100),
    ),
    # memory
    _gauge(
        "gpu_memory_total_bytes", "bytes", "Framebuffer memory installed", "memory",
        NvmlSource("nvmlDeviceGetMemoryInfo", "total"), DcgmSource(250, MIB), "DCGM_FI_DEV_FB_TOTAL", 1 / MIB,
        mig=True,
    ),
    _gauge(
        "gpu_memory_used_bytes", "bytes", "Framebuffer memory allocated, excluding memory reserved by the driver",
        "memory", NvmlSource("nvmlDeviceGetMemoryInfo", "used"), DcgmSource(252, MIB),
        "DCGM_FI_DEV_FB_USED", 1 / MIB, mig=True,
    ),
    _gauge(
        "gpu_memory_free_bytes", "bytes", "Framebuffer memory available for allocation", "memory",
        NvmlSource("nvmlDeviceGetMemoryInfo", "free"), DcgmSource(251, MIB), "DCGM_FI_DEV_FB_FREE", 1 / MIB,
        mig=True,
    ),
    _gauge(
        "gpu_memory_reserved_bytes", "bytes", "Framebuffer memory reserved by the driver and firmware", "memory",
        NvmlSource("nvmlDeviceGetMemoryInfo", "reserved"), DcgmSource(253, MIB),
        "DCGM_FI_DEV_FB_RESERVED", 1 / MIB,
    ),
    _gauge(
        "gpu_bar1_memory_total_bytes", "bytes", "BAR1 aperture size", "memory",
        NvmlSource("nvmlDeviceGetBAR1MemoryInfo", "total"), DcgmSource(90, MIB), every=STATIC,
    ),
    _gauge(
        "gpu_bar1_memory_used_bytes", "bytes", "BAR1 aperture in use", "memory",
        NvmlSource("nvmlDeviceGetBAR1MemoryInfo", "used"), DcgmSource(92, MIB),
    ),
    # temperature and cooling
    _gauge(
        "gpu_temperature_celsius", "celsius", "GPU core temperature", "temperature",
        NvmlSource("nvmlDeviceGetTemperature", "gpu"), DcgmSource(150), "DCGM_FI_DEV_GPU_TEMP",
    ),
    _gauge(
        "gpu_memory_temperature_celsius", "celsius", "Memory (HBM) temperature", "temperature",
        NvmlSource("nvmlDeviceGetFieldValues", "memory_temperature"), DcgmSource(140),
        "DCGM_FI_DEV_MEMORY_TEMP",
    ),
    _gauge(
        "gpu_temperature_slowdown_threshold_celsius", "celsius",
        "Core temperature at which the GPU starts to slow its clocks", "temperature",
        NvmlSource("nvmlDeviceGetTemperatureThreshold", "slowdown"), DcgmSource(158), "DCGM_FI_DEV_SLOWDOWN_TEMP",
        every=STATIC,
    ),
    _gauge(
        "gpu_temperature_shutdown_threshold_celsius", "celsius",
        "Core temperature at which the GPU shuts down to protect itself", "temperature",
        NvmlSource("nvmlDeviceGetTemperatureThreshold", "shutdown"), DcgmSource(159), "DCGM_FI_DEV_SHUTDOWN_TEMP",
        every=STATIC,
    ),
    _gauge(
        "gpu_temperature_max_operating_celsius", "celsius", "Maximum operating core temperature", "temperature",
        NvmlSource("nvmlDeviceGetTemperatureThreshold", "max_operating"), DcgmSource(152),
        "DCGM_FI_DEV_GPU_MAX_OP_TEMP", every=STATIC,
    ),
    _gauge(
        "gpu_memory_temperature_max_operating_celsius", "celsius", "Maximum operating memory (HBM) temperature",
        "temperature", NvmlSource("nvmlDeviceGetTemperatureThreshold", "memory_max_operating"), DcgmSource(151),
        "DCGM_FI_DEV_MEM_MAX_OP_TEMP", every=STATIC,
    ),
    _gauge(
        "gpu_fan_speed_ratio", "ratio", "Fan speed as a fraction of its maximum (intended speed)", "temperature",
        NvmlSource("nvmlDeviceGetFanSpeed", "", _PERCENT), DcgmSource(191, _PERCENT),
        "DCGM_FI_DEV_FAN_SPEED", Fraction(100), maximum=2.0,  # NVML: "may exceed 100%"
    ),
    # power
    _gauge(
        "gpu_power_watts", "watts", "Power draw of the whole board", "power",
        NvmlSource("nvmlDeviceGetPowerUsage", "", _MILLI), DcgmSource(155), "DCGM_FI_DEV_POWER_USAGE",
    ),
    _gauge(
        "gpu_power_limit_watts", "watts", "Power limit the driver enforces, after all limiters", "power",
        NvmlSource("nvmlDeviceGetEnforcedPowerLimit", "", _MILLI), DcgmSource(164),
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
    ),
    _gauge(
        "gpu_power_default_limit_watts", "watts", "Default power management limit of the board", "power",
        NvmlSource("nvmlDeviceGetPowerManagementDefaultLimit", "", _MILLI), DcgmSource(163),
        "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", every=STATIC,
    ),
    _counter(
        "gpu_energy_joules_total", "joules", "Energy consumed since the driver was loaded", "power",
        NvmlSource("nvmlDeviceGetTotalEnergyConsumption", "", _MILLI), DcgmSource(156, _MILLI),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Fraction(1000),
    ),
    # clocks
    _gauge(
        "gpu_sm_clock_hertz", "hertz", "Current SM clock", "clocks",
        NvmlSource("nvmlDeviceGetClockInfo", "sm", _MHZ), DcgmSource(100, _MHZ), "DCGM_FI_DEV_SM_CLOCK", 1 / _MHZ,
    ),
    _gauge(
        "gpu_memory_clock_hertz", "hertz", "Current memory clock", "clocks",
        NvmlSource("nvmlDeviceGetClockInfo", "memory", _MHZ), DcgmSource(101, _MHZ),
        "DCGM_FI_DEV_MEM_CLOCK", 1 / _MHZ,
    ),
    _gauge(
        "gpu_sm_clock_max_hertz", "hertz", "Maximum SM clock the GPU supports", "clocks",
        NvmlSource("nvmlDeviceGetMaxClockInfo", "sm", _MHZ), DcgmSource(113, _MHZ),
        "DCGM_FI_DEV_MAX_SM_CLOCK", 1 / _MHZ, every=STATIC,
    ),
    _gauge(
        "gpu_memory_clock_max_hertz", "hertz", "Maximum memory clock the GPU supports", "clocks",
        NvmlSource("nvmlDeviceGetMaxClockInfo", "memory", _MHZ), DcgmSource(114, _MHZ),
        "DCGM_FI_DEV_MAX_MEM_CLOCK", 1 / _MHZ, every=STATIC,
    ),
    _gauge(
        "gpu_performance_state", "", "Performance state, 0 (fastest) to 15 (slowest)", "clocks",
        NvmlSource("nvmlDeviceGetPerformanceState"), DcgmSource(190), "DCGM_FI_DEV_PSTATE", maximum=15,
    ),
    # PCIe
    _gauge(
        "gpu_pcie_link_generation", "", "Current PCIe link generation (drops at idle to save power)", "pcie",
        NvmlSource("nvmlDeviceGetCurrPcieLinkGeneration"), DcgmSource(237), "DCGM_FI_DEV_PCIE_LINK_GEN", maximum=16,
    ),
    _gauge(
        "gpu_pcie_link_generation_max", "", "Highest PCIe link generation this GPU and slot support", "pcie",
        NvmlSource("nvmlDeviceGetMaxPcieLinkGeneration"), DcgmSource(235), "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", maximum=16,
        every=STATIC,
    ),
    _gauge(
        "gpu_pcie_link_width", "", "Current PCIe link width (lanes)", "pcie",
        NvmlSource("nvmlDeviceGetCurrPcieLinkWidth"), DcgmSource(238), "DCGM_FI_DEV_PCIE_LINK_WIDTH", maximum=64,
    ),
    _gauge(
        "gpu_pcie_link_width_max", "", "Widest PCIe link (lanes) this GPU and slot support", "pcie",
        NvmlSource("nvmlDeviceGetMaxPcieLinkWidth"), DcgmSource(236), "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", maximum=64,
        every=STATIC,
    ),
    _counter(
        "gpu_pcie_replay_errors_total", "", "PCIe replays (link-level retransmissions) since the driver loaded",
        "pcie", NvmlSource("nvmlDeviceGetPcieReplayCounter"), DcgmSource(202), "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    ),
    _gauge(
        "gpu_pcie_transmit_bytes_per_second", "bytes_per_second",
        "PCIe transmit throughput averaged over a 20 ms window (KB taken as 1024 bytes)", "pcie",
        NvmlSource("nvmlDeviceGetPcieThroughput", "tx", KIB), DcgmSource(200, KIB),
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", 1 / KIB, every=5,
    ),
    _gauge(
        "gpu_pcie_receive_bytes_per_second", "bytes_per_second",
        "PCIe receive throughput averaged over a 20 ms window (KB taken as 1024 bytes)", "pcie",
        NvmlSource("nvmlDeviceGetPcieThroughput", "rx", KIB), DcgmSource(201, KIB),
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", 1 / KIB, every=5,
    ),
    # clock events (throttling): one 0/1 series per reason bit
    *(
        _gauge(
            "gpu_clock_event_active", "",
            "1 while this reason holds the clocks below their target (clock event, formerly throttle reason)",
            "clock_events", NvmlSource("nvmlDeviceGetCurrentClocksEventReasons", reason), DcgmSource(112, bit=bit),
            variant=(("reason", reason),), maximum=1,
        )
        for reason, bit in CLOCK_EVENT_REASONS
    ),
    *(
        _counter(
            "gpu_clock_throttle_seconds_total", "seconds",
            "Cumulative time the clocks were held below their target by this cause", "clock_events",
            NvmlSource("nvmlDeviceGetViolationStatus", policy, Fraction(1, 10**9)),
            DcgmSource(field_id, Fraction(1, 10**9)), compat, Fraction(10**9), variant=(("reason", policy),),
        )
        for policy, field_id, compat in VIOLATION_POLICIES
    ),
    # memory errors
    _gauge(
        "gpu_ecc_mode_enabled", "", "1 when ECC is enabled (current mode)", "ecc",
        NvmlSource("nvmlDeviceGetEccMode", "current"), DcgmSource(300), "DCGM_FI_DEV_ECC_CURRENT", maximum=1,
        every=STATIC,
    ),
    *(
        _counter(
            "gpu_ecc_errors_total", "",
            "ECC errors in device memory; volatile counts since the driver loaded, aggregate over the board's life",
            "ecc", NvmlSource("nvmlDeviceGetTotalEccErrors", f"{kind}_{counter}"), DcgmSource(field_id), compat,
            variant=(("type", kind), ("counter", counter)),
        )
        for kind, counter, field_id, compat in (
            ("corrected", "volatile", 310, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
            ("uncorrected", "volatile", 311, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
            ("corrected", "aggregate", 312, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"),
            ("uncorrected", "aggregate", 313, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"),
        )
    ),
    _counter(
        "gpu_remapped_rows_total", "", "Memory rows remapped to spare rows, by the kind of error that caused it", "ecc",
        NvmlSource("nvmlDeviceGetRemappedRows", "correctable"), DcgmSource(394),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", variant=(("cause", "correctable"),),
    ),
    _counter(
        "gpu_remapped_rows_total", "", "Memory rows remapped to spare rows, by the kind of error that caused it", "ecc",
        NvmlSource("nvmlDeviceGetRemappedRows", "uncorrectable"), DcgmSource(393),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", variant=(("cause", "uncorrectable"),),
    ),
    _gauge(
        "gpu_row_remap_pending", "", "1 when a row remap is pending: reset the GPU to apply it", "ecc",
        NvmlSource("nvmlDeviceGetRemappedRows", "pending"), DcgmSource(396), "DCGM_FI_DEV_ROW_REMAP_PENDING",
        maximum=1,
    ),
    _gauge(
        "gpu_row_remap_failed", "", "1 when a row remap failed: the GPU needs service", "ecc",
        NvmlSource("nvmlDeviceGetRemappedRows", "failure"), DcgmSource(395), "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        maximum=1,
    ),
    _counter(
        "gpu_retired_pages_total", "", "Framebuffer pages retired (pre-Ampere page retirement), by cause", "ecc",
        NvmlSource("nvmlDeviceGetRetiredPages", "multiple_single_bit"), DcgmSource(390), "DCGM_FI_DEV_RETIRED_SBE",
        variant=(("cause", "multiple_single_bit"),),
    ),
    _counter(
        "gpu_retired_pages_total", "", "Framebuffer pages retired (pre-Ampere page retirement), by cause", "ecc",
        NvmlSource("nvmlDeviceGetRetiredPages", "double_bit"), DcgmSource(391), "DCGM_FI_DEV_RETIRED_DBE",
        variant=(("cause", "double_bit"),),
    ),
    _gauge(
        "gpu_retired_pages_pending", "", "1 when pages wait to be retired at the next driver reload", "ecc",
        NvmlSource("nvmlDeviceGetRetiredPagesPendingStatus"), DcgmSource(392), "DCGM_FI_DEV_RETIRED_PENDING",
        maximum=1,
    ),
    # NVLink, one series per link (collector off by default: up to 18 links per GPU). DCGM has per-link
    # error counters but only a rate for per-link traffic (whole MB/s), so the byte counters are NVML's only.
    MetricSpec(
        "gpu_nvlink_up", "gauge", "", "1 while this NVLink is active, 0 while it is down or disabled", "nvlink",
        NvmlSource("nvmlDeviceGetNvLinkState"), DcgmSource(0, call="dcgmGetNvLinkLinkStatus"), maximum=1,
        per_link=True,
    ),
    MetricSpec(
        "gpu_nvlink_transmit_bytes_total", "counter", "bytes", "Data sent over this NVLink since the driver loaded",
        "nvlink", NvmlSource("nvmlDeviceGetFieldValues", "nvlink_tx", KIB), None, per_link=True,
    ),
    MetricSpec(
        "gpu_nvlink_receive_bytes_total", "counter", "bytes", "Data received over this NVLink since the driver loaded",
        "nvlink", NvmlSource("nvmlDeviceGetFieldValues", "nvlink_rx", KIB), None, per_link=True,
    ),
    *(
        MetricSpec(
            "gpu_nvlink_errors_total", "counter", "",
            "NVLink data-link errors on this link since the driver loaded, by type (crc_data: corrupted flits; "
            "replay: retransmissions; recovery: link retraining)", "nvlink",
            NvmlSource("nvmlDeviceGetNvLinkErrorCounter", kind), DcgmSource(fields[0], links=fields),
            variant=(("type", kind),), per_link=True,
        )
        for kind, fields in NVLINK_ERROR_FIELDS
    ),
    # ---- BEGIN DCGM-only profiling (DCP) metrics (issue 4) ------------------------------------------------
    # Collector "profiling" (off by default: the profiling counters are one lock per GPU, shared with Nsight
    # and CUPTI). NVML has no source for these, so they have names of their own; DCGM reports ratios 0-1 and
    # bytes per second already, averaged over its sample period. The per-instance ones are read per MIG
    # compute instance (DRAM activity per GPU instance, which DCGM maps for us).
    _gauge(
        "gpu_graphics_engine_active_ratio", "ratio",
        "Fraction of time the graphics or compute engine had any work in flight", "profiling",
        None, DcgmSource(1001), "DCGM_FI_PROF_GR_ENGINE_ACTIVE", mig=True,
    ),
    _gauge(
        "gpu_sm_active_ratio", "ratio",
        "Fraction of time at least one warp was resident on a streaming multiprocessor, averaged over all SMs "
        "(low while gpu_utilization_ratio is high means kernels that occupy few SMs)", "profiling",
        None, DcgmSource(1002), "DCGM_FI_PROF_SM_ACTIVE", mig=True,
    ),
    _gauge(
        "gpu_sm_occupancy_ratio", "ratio",
        "Resident warps as a fraction of the most a streaming multiprocessor can hold, averaged over all SMs",
        "profiling", None, DcgmSource(1003), "DCGM_FI_PROF_SM_OCCUPANCY", mig=True,
    ),
    _gauge(
        "gpu_tensor_pipe_active_ratio", "ratio", "Fraction of cycles any tensor-core pipe was active", "profiling",
        None, DcgmSource(1004), "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", mig=True,
    ),
    _gauge(
        "gpu_dram_active_ratio", "ratio",
        "Fraction of cycles the device memory interface was busy sending or receiving data", "profiling",
        None, DcgmSource(1005), "DCGM_FI_PROF_DRAM_ACTIVE", mig=True,
    ),
    _gauge(
        "gpu_fp64_pipe_active_ratio", "ratio", "Fraction of cycles the FP64 (double precision) pipe was active",
        "profiling", None, DcgmSource(1006), "DCGM_FI_PROF_PIPE_FP64_ACTIVE", mig=True,
    ),
    _gauge(
        "gpu_fp32_pipe_active_ratio", "ratio", "Fraction of cycles the FP32 (single precision) pipe was active",
        "profiling", None, DcgmSource(1007), "DCGM_FI_PROF_PIPE_FP32_ACTIVE", mig=True,
    ),
    _gauge(
        "gpu_fp16_pipe_active_ratio", "ratio", "Fraction of cycles the FP16 (half precision) pipe was active",
        "profiling", None, DcgmSource(1008), "DCGM_FI_PROF_PIPE_FP16_ACTIVE", mig=True,
    ),
    _gauge(
        "gpu_pcie_transmit_with_headers_bytes_per_second", "bytes_per_second",
        "PCIe traffic sent by the GPU, protocol headers included, averaged over the sample period (unlike "
        "gpu_pcie_transmit_bytes_per_second, a 20 ms window)", "profiling",
        None, DcgmSource(1009), "DCGM_FI_PROF_PCIE_TX_BYTES",
    ),
    _gauge(
        "gpu_pcie_receive_with_headers_bytes_per_second", "bytes_per_second",
        "PCIe traffic received by the GPU, protocol headers included, averaged over the sample period (unlike "
        "gpu_pcie_receive_bytes_per_second, a 20 ms window)", "profiling",
        None, DcgmSource(1010), "DCGM_FI_PROF_PCIE_RX_BYTES",
    ),
    _gauge(
        "gpu_nvlink_transmit_bytes_per_second", "bytes_per_second",
        "NVLink traffic sent by the GPU over all its links, protocol headers included", "profiling",
        # NVLink 5 moves 0.9 TB/s each way, near the generic 1e12 bound: leave room for the next generation.
        None, DcgmSource(1011), "DCGM_FI_PROF_NVLINK_TX_BYTES", maximum=1e13,
    ),
    _gauge(
        "gpu_nvlink_receive_bytes_per_second", "bytes_per_second",
        "NVLink traffic received by the GPU over all its links, protocol headers included", "profiling",
        None, DcgmSource(1012), "DCGM_FI_PROF_NVLINK_RX_BYTES", maximum=1e13,
    ),
    # ---- END DCGM-only profiling metrics ------------------------------------------------------------------
)  # fmt: skip

BY_KEY: dict[str, MetricSpec] = {spec.key: spec for spec in METRICS}
#: Rows of each family, in table order (most families have one row).
FAMILIES: dict[str, tuple[MetricSpec, ...]] = {
    name: tuple(spec for spec in METRICS if spec.name == name) for name in dict.fromkeys(s.name for s in METRICS)
}


def bound(spec: MetricSpec) -> float | None:
    """The largest plausible value of ``spec`` in base units (its own maximum, else its unit's)."""
    return spec.maximum if spec.maximum is not None else UNIT_MAXIMA.get(spec.unit)


#: NVSwitch port error counter type → DCGM field (per port entity; DCGM reads them from the switch driver).
#: Fields 782/783 (port fatal and non-fatal errors) are not here: DCGM stores error records (a code and a
#: time per error) in them, not counts.
NVSWITCH_PORT_ERRORS: tuple[tuple[str, int], ...] = (
    ("replay", 784),
    ("recovery", 785),
    ("flit", 786),
    ("crc", 787),
    ("ecc", 788),
)

#: NVSwitch metrics (collector ``nvswitch``, DCGM only: NVML cannot see the switches). Series carry the
#: ``nvswitch`` label (DCGM's switch id, see gpu_nvswitch_info), port series also ``nvlink`` (the port).
#: Switch traffic counters are left out: DCGM documents no unit for them and reads 0 on H100 systems.
#: Every row is read every cycle (``every`` stays 1): they arrive in the same DCGM fetch as the GPUs'.
SWITCH_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "gpu_nvswitch_temperature_celsius", "gauge", "celsius", "NVSwitch die temperature", "nvswitch",
        None, DcgmSource(858), nvswitch=True,
    ),
    MetricSpec(
        "gpu_nvswitch_temperature_slowdown_threshold_celsius", "gauge", "celsius",
        "NVSwitch temperature at which the switch slows its links down", "nvswitch",
        None, DcgmSource(859), nvswitch=True,
    ),
    MetricSpec(
        "gpu_nvswitch_temperature_shutdown_threshold_celsius", "gauge", "celsius",
        "NVSwitch temperature at which the switch shuts down", "nvswitch",
        None, DcgmSource(860), nvswitch=True,
    ),
    *(
        MetricSpec(
            "gpu_nvswitch_power_watts", "gauge", "watts", "NVSwitch power draw by supply rail", "nvswitch",
            None, DcgmSource(field_id), variant=(("rail", rail),), nvswitch=True,
        )
        for rail, field_id in (("vdd", 705), ("dvdd", 706), ("hvdd", 707))
    ),
    MetricSpec(
        "gpu_nvswitch_voltage_volts", "gauge", "volts", "NVSwitch core supply voltage", "nvswitch",
        None, DcgmSource(701, _MILLI), nvswitch=True,
    ),
    MetricSpec(
        "gpu_nvswitch_reset_required", "gauge", "", "1 when the NVSwitch needs a reset (after a fatal error)",
        "nvswitch", None, DcgmSource(864), maximum=1, nvswitch=True,
    ),
    *(
        MetricSpec(
            "gpu_nvswitch_last_sxid", "gauge", "",
            "Number of the latest SXid (NVSwitch error) DCGM holds for this switch, by severity; absent when it "
            "holds none. DCGM keeps the value until its switch module re-attaches, so a series present means an "
            "SXid was recorded, not that a new one just happened", "nvswitch",
            None, DcgmSource(field_id), variant=(("severity", severity),), nvswitch=True,
        )
        for severity, field_id in (("fatal", 856), ("non_fatal", 857))
    ),
    MetricSpec(
        "gpu_nvswitch_nvlink_up", "gauge", "", "1 while this NVSwitch port's NVLink is active, 0 while it is down "
        "or disabled", "nvswitch", None, DcgmSource(0, call="dcgmGetNvLinkLinkStatus"), maximum=1,
        per_link=True, nvswitch=True,
    ),
    *(
        MetricSpec(
            "gpu_nvswitch_nvlink_errors_total", "counter", "",
            "Errors on this NVSwitch port since the switch driver loaded, by type (replay: retransmissions, "
            "recovery: link retraining, flit, crc, ecc)", "nvswitch",
            None, DcgmSource(field_id), variant=(("type", kind),), per_link=True, nvswitch=True,
        )
        for kind, field_id in NVSWITCH_PORT_ERRORS
    ),
)  # fmt: skip
#: DCGM fields of each NVSwitch's identity (gpu_nvswitch_info): physical id, PCI domain/bus/device/function.
#: (Field 878, "NVSwitch UUID", is a port field on NSCQ-managed switches: the UUID of the device at the far end.)
NVSWITCH_IDENTITY_FIELDS: tuple[int, ...] = (863, 866, 867, 868, 869)


@dataclass(frozen=True)
class FixedMetric:
    """A metric with no vendor source: identity, per-GPU state and the exporter's self-metrics."""

    name: str
    kind: Kind
    unit: str
    labels: tuple[str, ...]
    help: str


IDENTITY_METRICS: tuple[FixedMetric, ...] = (
    FixedMetric(
        "gpu_info",
        "gauge",
        "",
        INFO_LABELS,
        "Identity of each GPU; value is always 1. Source: NVML device and system queries.",
    ),
    FixedMetric("gpu_up", "gauge", "", DEVICE_LABELS, "1 while the GPU answers, 0 after the driver reported it lost."),
    FixedMetric(
        "gpu_mig_info",
        "gauge",
        "",
        MIG_INFO_LABELS,
        "Identity of each MIG device; value is always 1. Source: NVML MIG device handles.",
    ),
)
#: Metrics counted from driver events (collector ``xid``).
EVENT_METRICS: tuple[FixedMetric, ...] = (
    FixedMetric(
        "gpu_xid_errors_total",
        "counter",
        "",
        (*DEVICE_LABELS, "xid"),
        "Xid errors reported by the driver since the exporter started, by Xid code (codes of the Xid table "
        "start at 0). Source: NVML nvmlEventSetWait (nvmlEventTypeXidCriticalError); DCGM field 230.",
    ),
    FixedMetric(
        "gpu_xid_last_timestamp_seconds",
        "gauge",
        "seconds",
        DEVICE_LABELS,
        "Unix time of the last Xid error on this GPU since the exporter started.",
    ),
    FixedMetric(
        "gpu_ecc_error_events_total",
        "counter",
        "",
        (*DEVICE_LABELS, "type"),
        "ECC error events delivered by the driver since the exporter started (single_bit, double_bit). "
        "Source: NVML nvmlEventSetWait.",
    ),
)
SELF_METRICS: tuple[FixedMetric, ...] = (
    FixedMetric(
        "gpu_exporter_build_info", "gauge", "", ("version", "python_version"), "gpu-exporter build; value is always 1."
    ),
    FixedMetric(
        "gpu_exporter_backend_info",
        "gauge",
        "",
        ("backend", "reason"),
        "Backend in use and why it was chosen (or why it is down); value is always 1.",
    ),
    FixedMetric("gpu_exporter_backend_up", "gauge", "", (), "1 while the backend is initialised and answering."),
    FixedMetric(
        "gpu_exporter_collect_interval_seconds", "gauge", "seconds", (), "Configured time between sampling cycles."
    ),
    FixedMetric(
        "gpu_exporter_sample_duration_seconds",
        "gauge",
        "seconds",
        (),
        "Wall time of the last sampling cycle, all GPUs.",
    ),
    FixedMetric(
        "gpu_exporter_last_sample_timestamp_seconds",
        "gauge",
        "seconds",
        (),
        "Unix time of the last cycle in which at least one GPU was sampled.",
    ),
    FixedMetric(
        "gpu_exporter_sample_errors_total",
        "counter",
        "",
        ("kind",),
        "Failed vendor calls by error kind since start (the value is left out; unsupported is not an error).",
    ),
    FixedMetric(
        "gpu_exporter_invalid_values_total",
        "counter",
        "",
        ("field",),
        "Values dropped as physically implausible (driver sentinels, beyond physical bounds, used above total), "
        "by metric.",
    ),
    FixedMetric(
        "gpu_exporter_device_read_duration_seconds",
        "gauge",
        "seconds",
        DEVICE_LABELS,
        "Wall time of the last completed read of each GPU.",
    ),
    FixedMetric(
        "gpu_exporter_device_stalled",
        "gauge",
        "",
        DEVICE_LABELS,
        "1 while a GPU's read has not returned within one interval (a hung driver call).",
    ),
)
#: NVSwitch identity (collector ``nvswitch``, DCGM only).
SWITCH_FIXED_METRICS: tuple[FixedMetric, ...] = (
    FixedMetric(
        "gpu_nvswitch_info",
        "gauge",
        "",
        ("nvswitch", "pci_bus_id", "physical_id"),
        "Identity of each NVSwitch (DCGM's switch id, PCI bus id, physical id); value is always 1. Source: DCGM "
        "fields 866-869, 863.",
    ),
)
FIXED: dict[str, FixedMetric] = {
    metric.name: metric for metric in (*IDENTITY_METRICS, *EVENT_METRICS, *SWITCH_FIXED_METRICS, *SELF_METRICS)
}


@dataclass(frozen=True)
class Xid:
    """What an Xid code means, in a few words, and how urgent it is (critical, warning or info)."""

    description: str
    severity: Literal["critical", "warning", "info"]


#: Known Xid codes: shared by the exporter (pre-created zero counters), the alert rules and the
#: status page. Descriptions are ours, summarising NVIDIA's Xid catalogue.
XID_CODES: dict[int, Xid] = {
    13: Xid("graphics engine exception: usually an application fault such as an out-of-range access", "warning"),
    31: Xid("GPU memory page fault: usually an application bug, sometimes a driver bug", "warning"),
    32: Xid("invalid or corrupted push buffer stream (PCIe or driver trouble)", "warning"),
    38: Xid("driver firmware error", "critical"),
    43: Xid("GPU stopped processing: the application's context was reset", "warning"),
    45: Xid("preemptive cleanup after earlier errors: a process was terminated", "info"),
    48: Xid("double-bit (uncorrectable) ECC error", "critical"),
    61: Xid("internal micro-controller breakpoint or warning", "warning"),
    62: Xid("internal micro-controller halt", "critical"),
    63: Xid("ECC page retirement or row remapping recorded", "warning"),
    64: Xid("ECC page retirement or row remapping failed", "critical"),
    74: Xid("NVLink error", "critical"),
    79: Xid("GPU has fallen off the bus", "critical"),
    92: Xid("high single-bit ECC error rate", "warning"),
    94: Xid("contained ECC error: the affected application was stopped", "warning"),
    95: Xid("uncontained ECC error: every application on the GPU is affected, reset needed", "critical"),
    109: Xid("context switch timeout", "warning"),
    119: Xid("GSP firmware RPC timeout", "critical"),
    120: Xid("GSP firmware error", "critical"),
    140: Xid("unrecovered ECC error", "critical"),
    154: Xid("GPU recovery action changed: the GPU needs a reset or node reboot", "critical"),
}

#: Collector names: the catalogue's, in table order, then ``xid`` (events rather than polled values).
COLLECTORS: tuple[str, ...] = (*dict.fromkeys(spec.collector for spec in (*METRICS, *SWITCH_METRICS)), "xid")
#: Collectors that are off unless enabled: expensive, or needing exclusive access to the GPU.
DEFAULT_OFF: frozenset[str] = frozenset({"profiling", "nvlink", "nvswitch"})
DEFAULT_COLLECTORS: frozenset[str] = frozenset(COLLECTORS) - DEFAULT_OFF


def scaled(raw: float, scale: Fraction) -> float:
    """``raw × scale`` rounded once (multiply by the numerator, then divide by the denominator), so
    integer vendor values convert to the nearest float: 312450 mW → 312.45 W exactly."""
    return raw * scale.numerator / scale.denominator


def enabled_specs(collectors: frozenset[str]) -> tuple[MetricSpec, ...]:
    """The GPU catalogue rows whose collector is enabled, in table order."""
    return tuple(spec for spec in METRICS if spec.collector in collectors)


def enabled_switch_specs(collectors: frozenset[str]) -> tuple[MetricSpec, ...]:
    """The NVSwitch rows whose collector is enabled, in table order."""
    return tuple(spec for spec in SWITCH_METRICS if spec.collector in collectors)
