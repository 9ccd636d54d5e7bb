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
    releases, numbers do not) and the factor from DCGM's unit to the base unit."""

    field_id: int
    scale: Fraction = ONE


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric about a GPU (or MIG device).

    ``unit`` is the base unit, also the name's suffix. ``collector`` is the ``--collector.NAME``
    that enables it. ``mig`` marks metrics NVML reports per MIG device. ``every`` samples an
    expensive call only every Nth cycle (the last value is kept in between). ``derived_from`` names
    the gauge a counter integrates over time instead of reading a vendor value. ``compat_name`` and
    ``compat_scale`` render the same sample under dcgm-exporter's name and unit.
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

    @property
    def help(self) -> str:
        """HELP text: the meaning, the unit and the source on each backend."""
        sources = []
        if self.nvml is not None:
            selector = f"({self.nvml.selector})" if self.nvml.selector else ""
            sources.append(f"NVML {self.nvml.call}{selector}")
        if self.dcgm is not None:
            sources.append(f"DCGM field {self.dcgm.field_id}")
        if self.derived_from is not None:
            sources.append(f"integrated from {self.derived_from} at every sample")
        return f"{self.description} ({self.unit}). Source: {'; '.join(sources)}."


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
) -> MetricSpec:
    return MetricSpec(name, "gauge", unit, description, collector, nvml, dcgm, compat, compat_scale, mig, every)


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
) -> MetricSpec:
    return MetricSpec(
        name, "counter", unit, description, collector, nvml, dcgm, compat, compat_scale, derived_from=derived_from
    )


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
        NvmlSource("nvmlDeviceGetBAR1MemoryInfo", "total"), DcgmSource(90, MIB),
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
    ),
    _gauge(
        "gpu_temperature_shutdown_threshold_celsius", "celsius",
        "Core temperature at which the GPU shuts down to protect itself", "temperature",
        NvmlSource("nvmlDeviceGetTemperatureThreshold", "shutdown"), DcgmSource(159), "DCGM_FI_DEV_SHUTDOWN_TEMP",
    ),
    _gauge(
        "gpu_temperature_max_operating_celsius", "celsius", "Maximum operating core temperature", "temperature",
        NvmlSource("nvmlDeviceGetTemperatureThreshold", "max_operating"), DcgmSource(152),
        "DCGM_FI_DEV_GPU_MAX_OP_TEMP",
    ),
    _gauge(
        "gpu_fan_speed_ratio", "ratio", "Fan speed as a fraction of its maximum (intended speed)", "temperature",
        NvmlSource("nvmlDeviceGetFanSpeed", "", _PERCENT), DcgmSource(191, _PERCENT),
        "DCGM_FI_DEV_FAN_SPEED", Fraction(100),
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
        "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF",
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
        "DCGM_FI_DEV_MAX_SM_CLOCK", 1 / _MHZ,
    ),
    _gauge(
        "gpu_memory_clock_max_hertz", "hertz", "Maximum memory clock the GPU supports", "clocks",
        NvmlSource("nvmlDeviceGetMaxClockInfo", "memory", _MHZ), DcgmSource(114, _MHZ),
        "DCGM_FI_DEV_MAX_MEM_CLOCK", 1 / _MHZ,
    ),
    _gauge(
        "gpu_performance_state", "", "Performance state, 0 (fastest) to 15 (slowest)", "clocks",
        NvmlSource("nvmlDeviceGetPerformanceState"), DcgmSource(190), "DCGM_FI_DEV_PSTATE",
    ),
    # PCIe
    _gauge(
        "gpu_pcie_link_generation", "", "Current PCIe link generation (drops at idle to save power)", "pcie",
        NvmlSource("nvmlDeviceGetCurrPcieLinkGeneration"), DcgmSource(237), "DCGM_FI_DEV_PCIE_LINK_GEN",
    ),
    _gauge(
        "gpu_pcie_link_generation_max", "", "Highest PCIe link generation this GPU and slot support", "pcie",
        NvmlSource("nvmlDeviceGetMaxPcieLinkGeneration"), DcgmSource(235), "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
    ),
    _gauge(
        "gpu_pcie_link_width", "", "Current PCIe link width (lanes)", "pcie",
        NvmlSource("nvmlDeviceGetCurrPcieLinkWidth"), DcgmSource(238), "DCGM_FI_DEV_PCIE_LINK_WIDTH",
    ),
    _gauge(
        "gpu_pcie_link_width_max", "", "Widest PCIe link (lanes) this GPU and slot support", "pcie",
        NvmlSource("nvmlDeviceGetMaxPcieLinkWidth"), DcgmSource(236), "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH",
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
)  # fmt: skip

BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in METRICS}


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
        "Failed vendor calls by NVML error kind since start (the value is left out; unsupported is not an error).",
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
FIXED: dict[str, FixedMetric] = {metric.name: metric for metric in (*IDENTITY_METRICS, *SELF_METRICS)}

#: Collector names in table order, from the catalogue.
COLLECTORS: tuple[str, ...] = tuple(dict.fromkeys(spec.collector for spec in METRICS))


def scaled(raw: float, scale: Fraction) -> float:
    """``raw × scale`` rounded once (multiply by the numerator, then divide by the denominator), so
    integer vendor values convert to the nearest float: 312450 mW → 312.45 W exactly."""
    return raw * scale.numerator / scale.denominator


def enabled_specs(collectors: frozenset[str]) -> tuple[MetricSpec, ...]:
    """The catalogue rows whose collector is enabled, in table order."""
    return tuple(spec for spec in METRICS if spec.collector in collectors)
